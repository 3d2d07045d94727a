#!/usr/bin/env python3
"""Golden values for tests/unit/test_golden.cpp: the whole Transformer, forward and backward.

An independent float64 implementation of the encoder-decoder Transformer of "Attention Is All
You Need" (Vaswani et al., 2017), written from the paper's definitions with plain PyTorch tensor
operations (no code from Tessera is used or imported). For each of two tiny configurations
(the paper's post-norm, and pre-norm) it draws random weights from a fixed seed, runs a small
ragged batch, and writes a text fixture with the weights, the inputs, the logits, the
label-smoothed loss and the gradient of that loss with respect to EVERY parameter.

Before writing, the script checks its own implementation twice over:
  * against torch.nn.Transformer built from the same weights (forward logits, and the loss
    gradients for every parameter), and against F.cross_entropy for the loss;
  * against central finite differences of the loss for a few parameter entries.

The C++ test reads only the text files; CI needs neither Python nor PyTorch. Run once, by hand:
    python3 tests/golden/make_transformer_golden.py          # needs torch (CPU is enough)
and commit the .txt files it writes next to itself.

Fixture format (one record per line, '#' starts a comment line):
    <name> <ndim> <dim_0> ... <dim_{ndim-1}> <value_0> <value_1> ...   (row-major, "%.17g")
Names: config/<field> (0-d), param/<tessera parameter name>, input/src, input/src_padding,
input/tgt_in, input/tgt_out (integer ids written as integers), output/logits [B, Lt, V],
output/loss (0-d), grad/<tessera parameter name>.
"""

import math
import os
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # Tessera's special ids (framework/data/vocab.h)

BASE = dict(vocab=11, d_model=8, heads=2, d_ff=16, encoder_layers=2, decoder_layers=2,
            layer_norm_eps=1e-5, label_smoothing=0.1)

# A ragged batch (B=3, Ls=5, Lt=6): sources are tokens, eos, then padding; decoder inputs are
# bos + tokens, outputs tokens + eos, then padding. Row 2 of src and row 1 of tgt are full length.
SRC = [[5, 9, 4, 3, 0],
       [7, 3, 0, 0, 0],
       [6, 10, 8, 1, 3]]
TGT_IN = [[2, 8, 5, 6, 0, 0],
          [2, 4, 9, 10, 7, 5],
          [2, 7, 0, 0, 0, 0]]
TGT_OUT = [[8, 5, 6, 3, 0, 0],
           [4, 9, 10, 7, 5, 3],
           [7, 3, 0, 0, 0, 0]]


# ------------------------------------------------------------------ parameters
def parameter_shapes(cfg):
    """Tessera's parameter names and shapes (models/transformer.cpp constructor), in its order."""
    d, ff, v = cfg["d_model"], cfg["d_ff"], cfg["vocab"]
    shapes = [("embed_tokens.weight", (v, d))]

    def linear(name, n_in, n_out):
        shapes.extend([(name + ".weight", (n_out, n_in)), (name + ".bias", (n_out,))])

    def norm(name):
        shapes.extend([(name + ".weight", (d,)), (name + ".bias", (d,))])

    def attention(name):
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear(f"{name}.{proj}", d, d)

    for i in range(cfg["encoder_layers"]):
        p = f"encoder.layers.{i}"
        attention(p + ".self_attn")
        norm(p + ".self_attn_layer_norm")
        linear(p + ".fc1", d, ff)
        linear(p + ".fc2", ff, d)
        norm(p + ".final_layer_norm")
    for i in range(cfg["decoder_layers"]):
        p = f"decoder.layers.{i}"
        attention(p + ".self_attn")
        norm(p + ".self_attn_layer_norm")
        attention(p + ".encoder_attn")
        norm(p + ".encoder_attn_layer_norm")
        linear(p + ".fc1", d, ff)
        linear(p + ".fc2", ff, d)
        norm(p + ".final_layer_norm")
    if cfg["pre_norm"]:
        norm("encoder.layer_norm")
        norm("decoder.layer_norm")
    return shapes


def random_parameters(cfg, seed):
    """Every parameter random, layer-norm gains and biases and linear biases included."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in parameter_shapes(cfg):
        if name == "embed_tokens.weight":
            t = torch.randn(shape, generator=g) / math.sqrt(cfg["d_model"])
        elif name.endswith("layer_norm.weight"):
            t = 0.5 + torch.rand(shape, generator=g)  # gains in [0.5, 1.5)
        elif name.endswith("layer_norm.bias"):
            t = 0.2 * torch.randn(shape, generator=g)
        elif name.endswith(".weight"):  # linear [out, in]: Xavier-uniform range
            bound = math.sqrt(6.0 / (shape[0] + shape[1]))
            t = (2 * torch.rand(shape, generator=g) - 1) * bound
        else:  # linear bias
            t = (2 * torch.rand(shape, generator=g) - 1) * 0.3
        # Rounded to float32 values: the C++ model (float32) then holds exactly these weights.
        params[name] = t.float().double().requires_grad_(True)
    return params


# ------------------------------------------------------------------ the model, from the paper
def sinusoid(length, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    pe = torch.zeros(length, d)
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 10000.0 ** (2 * i / d)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


def linear(p, name, x):
    return x @ p[name + ".weight"].t() + p[name + ".bias"]


def layer_norm(p, name, x, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as in Ba et al.
    return (x - mean) / torch.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def multi_head_attention(p, name, x_q, x_kv, allowed, heads):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i.
    allowed: bool [B, Lq, Lk], True where query i may attend to key j."""
    b, lq, d = x_q.shape
    lk = x_kv.shape[1]
    dk = d // heads

    def split(t, length):  # [B, L, d] -> [B, H, L, dk]
        return t.reshape(b, length, heads, dk).permute(0, 2, 1, 3)

    q = split(linear(p, name + ".q_proj", x_q), lq)
    k = split(linear(p, name + ".k_proj", x_kv), lk)
    v = split(linear(p, name + ".v_proj", x_kv), lk)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(dk)
    scores = scores.masked_fill(~allowed[:, None, :, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    heads_out = (weights @ v).permute(0, 2, 1, 3).reshape(b, lq, d)
    return linear(p, name + ".out_proj", heads_out)


def feed_forward(p, name, x):
    """FFN(x) = max(0, x W1 + b1) W2 + b2."""
    return linear(p, name + ".fc2", torch.relu(linear(p, name + ".fc1", x)))


def sublayer(cfg, p, norm_name, x, f):
    eps = cfg["layer_norm_eps"]
    if cfg["pre_norm"]:
        return x + f(layer_norm(p, norm_name, x, eps))
    return layer_norm(p, norm_name, x + f(x), eps)  # the paper: LayerNorm(x + Sublayer(x))


def reference_logits(cfg, p, src, tgt_in):
    d, h, eps = cfg["d_model"], cfg["heads"], cfg["layer_norm_eps"]
    E = p["embed_tokens.weight"]
    b, ls = src.shape
    lt = tgt_in.shape[1]
    src_real = src != PAD  # key padding: padded source positions are never attended to
    enc_allowed = src_real[:, None, :].expand(b, ls, ls)
    cross_allowed = src_real[:, None, :].expand(b, lt, ls)
    causal = torch.tril(torch.ones(lt, lt, dtype=torch.bool))[None].expand(b, lt, lt)

    x = E[src] * math.sqrt(d) + sinusoid(ls, d)
    for i in range(cfg["encoder_layers"]):
        n = f"encoder.layers.{i}"
        x = sublayer(cfg, p, n + ".self_attn_layer_norm", x,
                     lambda t: multi_head_attention(p, n + ".self_attn", t, t, enc_allowed, h))
        x = sublayer(cfg, p, n + ".final_layer_norm", x, lambda t: feed_forward(p, n, t))
    memory = layer_norm(p, "encoder.layer_norm", x, eps) if cfg["pre_norm"] else x

    y = E[tgt_in] * math.sqrt(d) + sinusoid(lt, d)
    for i in range(cfg["decoder_layers"]):
        n = f"decoder.layers.{i}"
        y = sublayer(cfg, p, n + ".self_attn_layer_norm", y,
                     lambda t: multi_head_attention(p, n + ".self_attn", t, t, causal, h))
        y = sublayer(cfg, p, n + ".encoder_attn_layer_norm", y,
                     lambda t: multi_head_attention(p, n + ".encoder_attn", t, memory, cross_allowed, h))
        y = sublayer(cfg, p, n + ".final_layer_norm", y, lambda t: feed_forward(p, n, t))
    if cfg["pre_norm"]:
        y = layer_norm(p, "decoder.layer_norm", y, eps)
    return y @ E.t()  # tied pre-softmax projection, no bias


def smoothed_loss(cfg, logits, targets):
    """Sum over non-pad rows of -sum_v q_v log p_v, q = (1 - eps) onehot(target) + eps / V."""
    v, eps = cfg["vocab"], cfg["label_smoothing"]
    logp = torch.log_softmax(logits.reshape(-1, v), dim=-1)
    t = targets.reshape(-1)
    q = (1 - eps) * F.one_hot(t, v).to(logp.dtype) + eps / v
    rows = -(q * logp).sum(-1)
    return (rows * (t != PAD).to(logp.dtype)).sum()


# ------------------------------------------------------------------ cross-checks
def torch_nn_logits(cfg, p, src, tgt_in):
    """The same model assembled from torch.nn.Transformer layers (a second implementation)."""
    d, h, ff, eps = cfg["d_model"], cfg["heads"], cfg["d_ff"], cfg["layer_norm_eps"]
    common = dict(d_model=d, nhead=h, dim_feedforward=ff, dropout=0.0, activation="relu",
                  layer_norm_eps=eps, batch_first=True, norm_first=cfg["pre_norm"])
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**common), cfg["encoder_layers"],
                                      norm=torch.nn.LayerNorm(d, eps=eps) if cfg["pre_norm"] else None,
                                      enable_nested_tensor=False)
    dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**common), cfg["decoder_layers"],
                                      norm=torch.nn.LayerNorm(d, eps=eps) if cfg["pre_norm"] else None)
    # Tessera name -> (torch.nn parameter, slice of it): q, k, v are packed in in_proj_*.
    where = {}
    with torch.no_grad():
        def put(name, module_param, rows=None):
            target = module_param if rows is None else module_param[rows]
            target.copy_(p[name])
            where[name] = (module_param, rows)

        def attn(mha, name):
            d_ = mha.embed_dim
            for j, x in enumerate("qkv"):
                put(f"{name}.{x}_proj.weight", mha.in_proj_weight, slice(j * d_, (j + 1) * d_))
                put(f"{name}.{x}_proj.bias", mha.in_proj_bias, slice(j * d_, (j + 1) * d_))
            put(name + ".out_proj.weight", mha.out_proj.weight)
            put(name + ".out_proj.bias", mha.out_proj.bias)

        def affine(mod, name):  # a LayerNorm or a Linear: weight and bias
            put(name + ".weight", mod.weight)
            put(name + ".bias", mod.bias)

        for i, layer in enumerate(enc.layers):
            n = f"encoder.layers.{i}"
            attn(layer.self_attn, n + ".self_attn")
            affine(layer.norm1, n + ".self_attn_layer_norm")
            affine(layer.linear1, n + ".fc1")
            affine(layer.linear2, n + ".fc2")
            affine(layer.norm2, n + ".final_layer_norm")
        for i, layer in enumerate(dec.layers):
            n = f"decoder.layers.{i}"
            attn(layer.self_attn, n + ".self_attn")
            affine(layer.norm1, n + ".self_attn_layer_norm")
            attn(layer.multihead_attn, n + ".encoder_attn")
            affine(layer.norm2, n + ".encoder_attn_layer_norm")
            affine(layer.linear1, n + ".fc1")
            affine(layer.linear2, n + ".fc2")
            affine(layer.norm3, n + ".final_layer_norm")
        if cfg["pre_norm"]:
            affine(enc.norm, "encoder.layer_norm")
            affine(dec.norm, "decoder.layer_norm")
    E = p["embed_tokens.weight"].detach().clone().requires_grad_(True)
    d_sqrt = math.sqrt(d)
    pad = src == PAD  # True = padded key, never attended to
    lt = tgt_in.shape[1]
    causal = torch.triu(torch.ones(lt, lt, dtype=torch.bool), diagonal=1)  # True = not allowed
    memory = enc(F.embedding(src, E) * d_sqrt + sinusoid(src.shape[1], d), src_key_padding_mask=pad)
    out = dec(F.embedding(tgt_in, E) * d_sqrt + sinusoid(lt, d), memory, tgt_mask=causal,
              memory_key_padding_mask=pad)
    logits = out @ E.t()

    def grads():  # after backward: gradients by Tessera name
        g = {"embed_tokens.weight": E.grad}
        for name, (module_param, rows) in where.items():
            g[name] = module_param.grad if rows is None else module_param.grad[rows]
        n_nn = sum(1 for _ in enc.parameters()) + sum(1 for _ in dec.parameters())
        assert len({id(mp) for mp, _ in where.values()}) == n_nn, "a torch.nn parameter was not set"
        return g

    return logits, grads


def finite_difference_check(cfg, p, src, tgt_in, tgt_out, analytic, picks, h=1e-6):
    worst = 0.0
    for name, flat in picks:
        t = p[name]
        with torch.no_grad():
            old = t.view(-1)[flat].item()
            t.view(-1)[flat] = old + h
            up = smoothed_loss(cfg, reference_logits(cfg, p, src, tgt_in), tgt_out).item()
            t.view(-1)[flat] = old - h
            down = smoothed_loss(cfg, reference_logits(cfg, p, src, tgt_in), tgt_out).item()
            t.view(-1)[flat] = old
        numeric = (up - down) / (2 * h)
        a = analytic[name].reshape(-1)[flat].item()
        worst = max(worst, abs(numeric - a) / max(1.0, abs(a)))
    return worst


# ------------------------------------------------------------------ output
def fmt(x):
    return "%.17g" % x


def record(name, tensor):
    t = torch.as_tensor(tensor)
    values = t.reshape(-1).tolist()
    is_int = not t.is_floating_point()
    return " ".join([name, str(t.dim())] + [str(s) for s in t.shape] +
                    [str(int(v)) if is_int else fmt(v) for v in values])


def make(cfg_name, pre_norm, seed, out_dir):
    cfg = dict(BASE, pre_norm=pre_norm)
    p = random_parameters(cfg, seed)
    src, tgt_in, tgt_out = (torch.tensor(x, dtype=torch.long) for x in (SRC, TGT_IN, TGT_OUT))

    logits = reference_logits(cfg, p, src, tgt_in)
    loss = smoothed_loss(cfg, logits, tgt_out)
    grads = dict(zip(p.keys(), torch.autograd.grad(loss, list(p.values()))))

    # Cross-check 1: torch.nn.Transformer with the same weights, and F.cross_entropy.
    nn_logits, nn_grads = torch_nn_logits(cfg, p, src, tgt_in)
    nn_loss = F.cross_entropy(nn_logits.reshape(-1, cfg["vocab"]), tgt_out.reshape(-1), ignore_index=PAD,
                              label_smoothing=cfg["label_smoothing"], reduction="sum")
    nn_loss.backward()
    g2 = nn_grads()
    assert set(g2) == set(grads), sorted(set(g2) ^ set(grads))
    d_logits = (nn_logits - logits).abs().max().item()
    d_loss = abs(nn_loss.item() - loss.item())
    d_grad = max((g2[k] - grads[k]).abs().max().item() for k in grads)
    # Cross-check 2: central differences on a few entries.
    picks = [("embed_tokens.weight", 3), ("embed_tokens.weight", 45),
             ("encoder.layers.0.self_attn.q_proj.weight", 10), ("encoder.layers.1.fc1.weight", 70),
             ("decoder.layers.1.encoder_attn.v_proj.bias", 2), ("decoder.layers.0.final_layer_norm.weight", 5),
             ("decoder.layers.0.self_attn.k_proj.weight", 17)]
    if pre_norm:
        picks += [("encoder.layer_norm.weight", 1), ("decoder.layer_norm.bias", 6)]
    d_fd = finite_difference_check(cfg, p, src, tgt_in, tgt_out, grads, picks)
    print(f"{cfg_name}: loss {loss.item():.6f}; vs torch.nn: logits {d_logits:.2e}, loss {d_loss:.2e}, "
          f"grads {d_grad:.2e}; finite differences {d_fd:.2e}")
    if max(d_logits, d_loss, d_grad) > 1e-10 or d_fd > 1e-6:
        sys.exit(f"{cfg_name}: the two implementations disagree; not writing fixtures")

    lines = [
        f"# Golden values for tests/unit/test_golden.cpp ({cfg_name}); written by make_transformer_golden.py.",
        f"# float64 reference, torch {torch.__version__}, weight seed {seed}. Format: name ndim dims... values...",
    ]
    for key in ("vocab", "d_model", "heads", "d_ff", "encoder_layers", "decoder_layers"):
        lines.append(record("config/" + key, torch.tensor(cfg[key])))
    lines.append(record("config/pre_norm", torch.tensor(int(pre_norm))))
    lines.append(record("config/layer_norm_eps", torch.tensor(cfg["layer_norm_eps"])))
    lines.append(record("config/label_smoothing", torch.tensor(cfg["label_smoothing"])))
    lines.append(record("input/src", src))
    lines.append(record("input/src_padding", (src == PAD).long()))
    lines.append(record("input/tgt_in", tgt_in))
    lines.append(record("input/tgt_out", tgt_out))
    for name, t in p.items():
        lines.append(record("param/" + name, t.detach()))
    lines.append(record("output/logits", logits.detach()))
    lines.append(record("output/loss", loss.detach()))
    for name, g in grads.items():
        lines.append(record("grad/" + name, g))
    path = os.path.join(out_dir, f"transformer_{cfg_name}.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    out_dir = os.path.dirname(os.path.abspath(__file__))
    make("post_norm", pre_norm=False, seed=20170612, out_dir=out_dir)
    make("pre_norm", pre_norm=True, seed=20170613, out_dir=out_dir)


if __name__ == "__main__":
    main()
