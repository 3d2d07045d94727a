#include "data/corpus.h"

// Implementation in progress.
