// Activation checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"):
// a function's forward runs without recording its graph, and backward runs it again, this time
// recording, to backpropagate through it. Memory for the function's intermediate results is
// traded for a second forward.
#pragma once

#include <functional>
#include <vector>

#include "autograd/var.h"

namespace tessera::ag {

using CheckpointFn = std::function<Var(const std::vector<Var>&)>;

// fn(inputs), as one node of the graph that keeps only `inputs` and the output. Its backward calls
// fn(inputs) again with the graph recorded and backpropagates the output's gradient through it
// into the inputs, so fn must compute the same values both times (dropout: the same Philox
// offsets). `inputs` lists every Var fn reads that needs a gradient, parameters included: a
// parameter's gradient-ready hook runs once the whole graph, not just fn, has passed it its part.
// The gradients equal those of fn(inputs) called directly, bit for bit: the recomputed graph adds
// its contributions to an input one at a time, as the direct call's would. With grad mode off,
// or no input needing a gradient, it is fn(inputs).
Var checkpoint(CheckpointFn fn, std::vector<Var> inputs);

}  // namespace tessera::ag
