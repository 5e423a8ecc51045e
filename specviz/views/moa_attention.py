"""What MoA's three attentions see, from a real forward of a shipped MoA drafter (notebook 08, section 1).

:func:`attention_maps` runs the target over a prompt (its keys/values at every layer land in its cache), then
the drafter the way it drafts a chain (``engines/drafters/moa_drafter.py``): LSA over each verified token's
per-layer (K, V), SA over the token embeddings (drafted tokens included), CA from SA's outputs into the memory
rows of the verified tokens. It recomputes each attention's softmax weights from the drafter's own modules and
checks them: the weights times the values, through the module's output projection, must give what the
module itself returns, up to rounding (``max_error`` in the result: the largest difference relative to the
largest value, per attention). :func:`attention_figure` draws the three patterns as
heatmaps; a blank cell is one the attention cannot see (masked).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch.nn import functional as F

from engines.drafters.moa_drafter import MoADrafter
from engines.drafters.moa_head import MoAHead, rotate


def _weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention weights ``[H, T, S]`` of queries ``[1, H, T, D]`` over keys ``[1, H_kv, S, D]``."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)[0]


def _apply(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``[H, T, S]`` weights times values ``[1, H_kv, S, D]`` → ``[1, T, H·D]``."""
    v = v.repeat_interleave(weights.shape[0] // v.shape[1], dim=1)[0].float()
    return (weights @ v).transpose(0, 1).reshape(1, weights.shape[1], -1)


@torch.no_grad()
def attention_maps(engine, prompt, drafter: str = "moa-tli0", draft_tokens: int = 4, lsa_token: int | None = None) -> dict:
    """LSA, SA and CA weights (mean over heads) of ``drafter`` drafting a greedy chain of ``draft_tokens``
    after ``prompt``: the target prefills the prompt and commits its first token (the root); every prompt token
    is verified, so each has a memory row; the chain's tokens are the drafter's own argmax.

    Returns ``lsa`` ``[L, L]`` (prompt token ``lsa_token``; by default the prompt's last word), ``sa`` ``[n, n]`` over committed + drafted
    tokens (NaN where causal masking hides a token), ``ca`` ``[γ + 1, 1 + m]`` from the root and each drafted
    token but the last over the null row and the m memory rows, the tokens, and ``max_error``."""
    head: MoAHead = engine.trained_drafter(drafter)
    if getattr(head, "kind", "") != "moa" or head.lsa is None or head.tli:
        raise ValueError(f"drafter must be a shipped MoA drafter with LSA and TLI = 0, got {drafter!r}")
    if not isinstance(draft_tokens, int) or isinstance(draft_tokens, bool) or not 1 <= draft_tokens <= 16:
        raise ValueError(f"draft_tokens must be an integer in 1..16, got {draft_tokens!r}")
    stack = head.stack
    ids = engine.encode(prompt)
    cache = stack.new_cache(len(ids) + draft_tokens + 2)
    root = int(stack.forward(ids, cache)[-1].argmax())  # the target's own first token: committed, not verified
    dtype = next(head.parameters()).dtype

    # LSA: the server's half, as MoAServer.block reads the target's cache (every prompt token is verified)
    server = MoADrafter(head, drafter).server
    block = server.block(cache, len(ids), {})
    rows = [block_rows for block_rows in _layer_rows(cache, len(ids))]
    layer_kv = torch.stack(rows, dim=1).to(dtype)  # [n, L, 2·E_kv]
    lsa = head.lsa
    x = lsa.input_norm(layer_kv) + lsa.layer_position
    n, layers, width = x.shape
    q, k, v = lsa.qkv(lsa.attn_norm(x)).view(n, layers, 3, lsa.heads, -1).permute(2, 0, 3, 1, 4)
    if lsa_token is None and isinstance(prompt, str):  # the prompt's last word (not the chat template's tokens)
        words = [i for i, t in enumerate(ids) if any(ch.isalpha() for ch in engine.detokenize([t]))]
        lsa_token = max([i for i in words if engine.detokenize([ids[i]]).strip() in prompt] or words or [n - 1])
    lsa_token = n - 1 if lsa_token is None else lsa_token
    token = lsa_token % n
    lsa_weights = _weights(q[token:token + 1], k[token:token + 1])  # [H, L, L], bidirectional: no mask
    attended = _apply(lsa_weights, v[token:token + 1]).to(dtype)
    mine = x[token:token + 1] + lsa.out(attended)
    mine = (mine + lsa.mlp(lsa.mlp_norm(mine))).mean(dim=1)
    errors = [_relative_error(mine, block.memory[token:token + 1])]

    # SA then CA, the chain as MoADrafter drafts it: SA causal over committed + drafted, CA over the memory
    memory_keys, memory_values = head.null_keys_values()
    keys, values = head.memory_keys_values(block.memory.to(dtype)[None])
    memory_keys, memory_values = torch.cat([memory_keys, keys], 2), torch.cat([memory_values, values], 2)
    committed, drafted = ids + [root], []
    for _ in range(draft_tokens):
        sequence = committed + drafted
        embeddings = stack.embed(sequence).to(dtype)
        out = head.self_attend(embeddings, torch.arange(len(sequence))[None])
        predicted = head.cross_attend(out[:, -1:], memory_keys, memory_values)
        logits = head(predicted)[0, -1].float()
        drafted.append(int(head.head.vocab_ids[int(logits.argmax())]))
    sequence = committed + drafted
    embeddings = stack.embed(sequence).to(dtype)
    positions = torch.arange(len(sequence))[None]
    cos, sin = stack.backbone.rotary_emb(embeddings, positions)
    sa = head.sa
    h = head.sa_norm(embeddings)
    q = rotate(sa.split(sa.q(h), sa.heads), cos, sin)
    k = rotate(sa.split(sa.k(h), sa.kv_heads), cos, sin)
    causal = torch.ones(len(sequence), len(sequence), dtype=torch.bool).tril()
    sa_weights = _weights(q, k, causal)
    mine = embeddings + sa.o(_apply(sa_weights, sa.split(sa.v(h), sa.kv_heads)).to(dtype))
    mine = mine + head.sa_mlp(head.sa_mlp_norm(mine))
    queries = head.self_attend(embeddings, positions)
    errors.append(_relative_error(mine, queries))

    ca = head.ca
    asking = queries[:, len(committed) - 1: -1]  # the root and each drafted token predict the next one
    cq = ca.split(ca.q(head.ca_norm(asking)), ca.heads)
    ca_weights = _weights(cq, memory_keys)
    mine = asking + ca.o(_apply(ca_weights, memory_values).to(dtype))
    mine = mine + head.ca_mlp(head.ca_mlp_norm(mine))
    errors.append(_relative_error(mine, head.cross_attend(asking, memory_keys, memory_values)))

    sa_mean = sa_weights.mean(0)
    sa_mean[~causal] = float("nan")
    return {"drafter": drafter, "ids": ids, "root": root, "drafted": drafted, "lsa_token": token,
            "lsa": lsa_weights.mean(0), "sa": sa_mean, "ca": ca_weights.mean(0), "heads": {
                "lsa": lsa.heads, "sa": sa.heads, "ca": ca.heads},
            "max_error": max(errors), "n_layers": layers}


def _relative_error(mine: torch.Tensor, reference: torch.Tensor) -> float:
    reference = reference.float()
    return float((mine.float() - reference).abs().max() / reference.abs().max().clamp_min(1e-12))


def _layer_rows(cache, n_valid: int):
    """Every layer's (K, V) rows of the last ``n_valid`` cached tokens, ``[n, 2·E_kv]`` each (the server's read)."""
    from engines.drafters.moa_head import layer_kv_rows

    end = cache.length()
    for i in range(len(cache.keys)):
        yield layer_kv_rows(cache.keys[i][:, :, end - n_valid:end], cache.values[i][:, :, end - n_valid:end])[0]


def _label(i: int, text: str) -> str:
    shown = text if text.strip() else repr(text)[1:-1] or "(special)"
    return f"{i}·{shown}"


def attention_figure(maps: dict, token_text, window: int = 12) -> go.Figure:
    """The three patterns side by side: LSA (layer × layer, one verified token), SA (the last ``window``
    committed tokens and the drafted ones, causal) and CA (the root and drafted tokens over the null row and
    the last ``window`` memory rows). Colour: attention weight, mean over heads, each panel on its own scale
    (its largest weight in its title); white: masked, the attention cannot see it."""
    ids, root, drafted = maps["ids"], maps["root"], maps["drafted"]
    sequence = ids + [root] + drafted
    labels = [_label(i, token_text(t)) for i, t in enumerate(sequence)]
    start = max(len(ids) + 1 - window, 0)
    sa = maps["sa"][start:, start:]
    memory_from = max(len(ids) - window, 0)
    ca = torch.cat([maps["ca"][:, :1], maps["ca"][:, 1 + memory_from:]], dim=1)
    ca_columns = ["null row"] + labels[memory_from:len(ids)]
    ca_rows = labels[len(ids):len(ids) + len(drafted)]
    layers = [str(i + 1) for i in range(maps["n_layers"])]
    panels = {"lsa": maps["lsa"], "sa": sa, "ca": ca}
    top = {name: float(torch.nan_to_num(z, nan=0.0).max()) for name, z in panels.items()}
    fig = make_subplots(rows=1, cols=3, column_widths=[0.3, 0.38, 0.32], horizontal_spacing=0.1,
                        subplot_titles=(f"LSA, token {labels[maps['lsa_token']]}: layer × layer (max {top['lsa']:.2f})",
                                        f"SA: token × token, causal (max {top['sa']:.2f})",
                                        f"CA: query × memory row (max {top['ca']:.2f})"))
    style = dict(colorscale="Viridis", zmin=0, showscale=False, hoverongaps=False)
    fig.add_trace(go.Heatmap(z=panels["lsa"].tolist(), x=layers, y=layers, zmax=top["lsa"], **style,
                             hovertemplate="layer %{y} attends to layer %{x}: %{z:.3f}<extra>LSA</extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=sa.tolist(), x=labels[start:], y=labels[start:], zmax=top["sa"], **style,
                             hovertemplate="%{y} attends to %{x}: %{z:.3f}<extra>SA</extra>"), 1, 2)
    fig.add_trace(go.Heatmap(z=ca.tolist(), x=ca_columns, y=ca_rows, zmax=top["ca"], **style,
                             hovertemplate="%{y} reads the memory row of %{x}: %{z:.3f}<extra>CA</extra>"), 1, 3)
    for col in (1, 2, 3):
        fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), showgrid=False, row=1, col=col)
        fig.update_xaxes(tickfont=dict(size=10), tickangle=-60, showgrid=False, row=1, col=col)
    fig.update_xaxes(title_text="layer (keys)", dtick=3, row=1, col=1)
    fig.update_yaxes(title_text="layer (queries)", dtick=3, row=1, col=1)
    first_draft = len(ids) + 1 - start  # SA's drafted tokens start here (the root just before)
    fig.add_shape(type="rect", xref="x2", yref="y2", x0=first_draft - 0.5, x1=len(labels) - start - 0.5,
                  y0=first_draft - 0.5, y1=len(labels) - start - 0.5, line=dict(color="#c62828", width=2))
    fig.update_layout(
        title=f"What MoA's attentions see: {maps['drafter']}, one real forward (mean over heads; white: masked)"
              f"<br><sup>SA's red box: the drafted tokens. CA's rows: the root and each drafted token but the last, "
              "each predicting the next; memory rows exist for verified tokens only</sup>",
        height=560, width=1000, plot_bgcolor="white", margin=dict(t=90, b=130, l=90, r=30))
    return fig
