#include "data/vocab.h"

// Implementation in progress.
