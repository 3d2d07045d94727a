#include "io/config.h"

// Implementation in progress.
