#include "eval/bleu.h"

// Implementation in progress.
