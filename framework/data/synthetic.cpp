#include "data/synthetic.h"

// Implementation in progress.
