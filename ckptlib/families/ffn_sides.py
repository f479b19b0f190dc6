"""Each family's feed-forward side as SimpleTuner checkpoints it for `torch-ffn` / `unsloth-ffn`
(CheckpointConfig.ffn_scope "side", ckptlib.spec.FeedForwardSide).

NOTE [ A side mirrors two sources ]
Each forward here computes what the installed diffusers' block computes, op for op (the tests compare
outputs and input gradients with the class's own forward), and splits it where SimpleTuner's copy of
the block calls `checkpoint_fn(self._ffn_forward, ...)` (the file each side names): the side's
arguments are that call's, so the checkpoint saves what SimpleTuner's saves, and everything the side
computes (the norms, the modulation, the gate and the residual with the MLP) is recomputed in
backward. A block with the "modules" scope recomputes only its feed-forward submodules: the norm's
input and the modulated MLP input stay saved outside, one more hidden state per stream and block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..spec import FeedForwardSide

if TYPE_CHECKING:
    import torch


def _clip_fp16(hidden_states: torch.Tensor) -> torch.Tensor:
    import torch

    return hidden_states.clip(-65504, 65504) if hidden_states.dtype == torch.float16 else hidden_states


def _attention_kwargs(image_rotary_emb, joint_attention_kwargs, attention_mask=None) -> dict:
    """The attention call's keywords as Flux's and Chroma's blocks pass them (Chroma's token mask
    expanded to a pairwise one)."""
    kwargs = {"image_rotary_emb": image_rotary_emb, **(joint_attention_kwargs or {})}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask[:, None, None, :] * attention_mask[:, None, :, None]
    return kwargs


# Flux and Chroma double-stream blocks: norm2, modulation, MLP, gate and residual of both streams.
def _double_stream_side(block, hidden, encoder_hidden, shift, scale, gate, c_shift, c_scale, c_gate, ip_attn=None):
    norm_hidden = block.norm2(hidden) * (1 + scale[:, None]) + shift[:, None]
    hidden = hidden + gate.unsqueeze(1) * block.ff(norm_hidden)
    if ip_attn is not None:
        hidden = hidden + ip_attn
    norm_encoder = block.norm2_context(encoder_hidden) * (1 + c_scale[:, None]) + c_shift[:, None]
    encoder_hidden = encoder_hidden + c_gate.unsqueeze(1) * block.ff_context(norm_encoder)
    return _clip_fp16(encoder_hidden), hidden


def _double_stream(block, run_side, hidden, encoder_hidden, temb, context_temb, attention_kwargs):
    norm_hidden, gate_msa, shift_mlp, scale_mlp, gate_mlp = block.norm1(hidden, emb=temb)
    norm_encoder, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp = block.norm1_context(
        encoder_hidden, emb=context_temb
    )
    outputs = block.attn(hidden_states=norm_hidden, encoder_hidden_states=norm_encoder, **attention_kwargs)
    attn_output, context_attn_output, *ip_attn = outputs
    hidden = hidden + gate_msa.unsqueeze(1) * attn_output
    encoder_hidden = encoder_hidden + c_gate_msa.unsqueeze(1) * context_attn_output
    mlp = (shift_mlp, scale_mlp, gate_mlp, c_shift_mlp, c_scale_mlp, c_gate_mlp)
    return run_side(_double_stream_side, hidden, encoder_hidden, *mlp, *ip_attn)


def _flux_double(
    block, run_side, hidden_states, encoder_hidden_states, temb, image_rotary_emb=None, joint_attention_kwargs=None
):
    kwargs = _attention_kwargs(image_rotary_emb, joint_attention_kwargs)
    return _double_stream(block, run_side, hidden_states, encoder_hidden_states, temb, temb, kwargs)


def _chroma_double(
    block,
    run_side,
    hidden_states,
    encoder_hidden_states,
    temb,
    image_rotary_emb=None,
    attention_mask=None,
    joint_attention_kwargs=None,
):
    kwargs = _attention_kwargs(image_rotary_emb, joint_attention_kwargs, attention_mask)
    return _double_stream(block, run_side, hidden_states, encoder_hidden_states, temb[:, :6], temb[:, 6:], kwargs)


# Flux and Chroma single-stream blocks: the MLP path (proj_mlp, GELU, the concat with attention,
# proj_out, gate, residual); the pre-norm it shares with attention stays outside.
def _single_stream_side(block, residual, norm_hidden, attn_output, gate):
    import torch

    mlp_hidden = block.act_mlp(block.proj_mlp(norm_hidden))
    hidden = gate.unsqueeze(1) * block.proj_out(torch.cat([attn_output, mlp_hidden], dim=2))
    return _clip_fp16(residual + hidden)


def _single_stream(block, run_side, hidden, temb, attention_kwargs):
    norm_hidden, gate = block.norm(hidden, emb=temb)
    attn_output = block.attn(hidden_states=norm_hidden, **attention_kwargs)
    return run_side(_single_stream_side, hidden, norm_hidden, attn_output, gate)


def _flux_single(
    block, run_side, hidden_states, encoder_hidden_states, temb, image_rotary_emb=None, joint_attention_kwargs=None
):
    import torch

    text_tokens = encoder_hidden_states.shape[1]
    joint = torch.cat([encoder_hidden_states, hidden_states], dim=1)
    kwargs = _attention_kwargs(image_rotary_emb, joint_attention_kwargs)
    joint = _single_stream(block, run_side, joint, temb, kwargs)
    return joint[:, :text_tokens], joint[:, text_tokens:]


def _chroma_single(
    block, run_side, hidden_states, temb, image_rotary_emb=None, attention_mask=None, joint_attention_kwargs=None
):
    kwargs = _attention_kwargs(image_rotary_emb, joint_attention_kwargs, attention_mask)
    return _single_stream(block, run_side, hidden_states, temb, kwargs)


# Krea 2: norm2, modulation, MLP, gate and residual.
def _krea2_side(block, hidden, postscale, postshift, postgate):
    return hidden + postgate * block.ff((1.0 + postscale) * block.norm2(hidden) + postshift)


def _krea2(block, run_side, hidden_states, temb, image_rotary_emb, attention_mask=None):
    modulation = temb.unflatten(-1, (6, -1)) + block.scale_shift_table
    prescale, preshift, pregate, postscale, postshift, postgate = modulation.unbind(-2)
    attn_out = block.attn(
        (1.0 + prescale) * block.norm1(hidden_states) + preshift,
        attention_mask=attention_mask,
        image_rotary_emb=image_rotary_emb,
    )
    hidden_states = hidden_states + pregate * attn_out
    return run_side(_krea2_side, hidden_states, postscale, postshift, postgate)


# Z-Image: the FFN norm (times the modulation's scale), the feed-forward and its post-norm; the gate
# and the residual stay outside.
def _z_image_side(block, x, scale_mlp=None):
    normed = block.ffn_norm1(x)
    return block.ffn_norm2(block.feed_forward(normed if scale_mlp is None else normed * scale_mlp))


def _z_image_modulation(block, seq_len, adaln_input, noise_mask, adaln_noisy, adaln_clean):
    """(scale_msa, gate_msa, scale_mlp, gate_mlp) as diffusers' ZImageTransformerBlock computes them."""
    if noise_mask is None:
        scale_msa, gate_msa, scale_mlp, gate_mlp = block.adaLN_modulation(adaln_input).unsqueeze(1).chunk(4, dim=2)
        return 1.0 + scale_msa, gate_msa.tanh(), 1.0 + scale_mlp, gate_mlp.tanh()
    from diffusers.models.transformers.transformer_z_image import select_per_token

    noisy, clean = (block.adaLN_modulation(a).chunk(4, dim=1) for a in (adaln_noisy, adaln_clean))
    noisy = (1.0 + noisy[0], noisy[1].tanh(), 1.0 + noisy[2], noisy[3].tanh())
    clean = (1.0 + clean[0], clean[1].tanh(), 1.0 + clean[2], clean[3].tanh())
    return tuple(select_per_token(n, c, noise_mask, seq_len) for n, c in zip(noisy, clean))


def _z_image(
    block,
    run_side,
    x,
    attn_mask,
    freqs_cis,
    adaln_input=None,
    noise_mask=None,
    adaln_noisy=None,
    adaln_clean=None,
):
    if not block.modulation:
        attn_out = block.attention(block.attention_norm1(x), attention_mask=attn_mask, freqs_cis=freqs_cis)
        x = x + block.attention_norm2(attn_out)
        return x + run_side(_z_image_side, x)
    scale_msa, gate_msa, scale_mlp, gate_mlp = _z_image_modulation(
        block, x.shape[1], adaln_input, noise_mask, adaln_noisy, adaln_clean
    )
    attn_out = block.attention(block.attention_norm1(x) * scale_msa, attention_mask=attn_mask, freqs_cis=freqs_cis)
    x = x + gate_msa * block.attention_norm2(attn_out)
    return x + gate_mlp * run_side(_z_image_side, x, scale_mlp)


_SIMPLETUNER = "simpletuner/helpers/models/{}/transformer.py"
DOUBLE_STREAM = ("norm2", "ff", "norm2_context", "ff_context")
SINGLE_STREAM = ("proj_mlp", "act_mlp", "proj_out")

FLUX_SIDES = {
    "FluxTransformerBlock": FeedForwardSide(_flux_double, DOUBLE_STREAM, _SIMPLETUNER.format("flux")),
    "FluxSingleTransformerBlock": FeedForwardSide(_flux_single, SINGLE_STREAM, _SIMPLETUNER.format("flux")),
}
CHROMA_SIDES = {
    "ChromaTransformerBlock": FeedForwardSide(_chroma_double, DOUBLE_STREAM, _SIMPLETUNER.format("chroma")),
    "ChromaSingleTransformerBlock": FeedForwardSide(_chroma_single, SINGLE_STREAM, _SIMPLETUNER.format("chroma")),
}
KREA2_SIDES = {"Krea2TransformerBlock": FeedForwardSide(_krea2, ("norm2", "ff"), _SIMPLETUNER.format("krea2"))}
Z_IMAGE_SIDES = {
    "ZImageTransformerBlock": FeedForwardSide(
        _z_image, ("ffn_norm1", "feed_forward", "ffn_norm2"), _SIMPLETUNER.format("z_image")
    )
}
