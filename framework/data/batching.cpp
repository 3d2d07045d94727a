#include "data/batching.h"

// Implementation in progress.
