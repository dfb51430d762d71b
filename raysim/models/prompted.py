"""Visual prompt tuning on an unmodified timm VisionTransformer.

:class:`PromptedViT` replays timm's ``forward_features`` block by block and inserts learnable tokens before
chosen blocks, right after the prefix (class and register) tokens, with no position embedding: VPT
(Jia et al., ECCV 2022) in its shallow and deep forms, and the growing-sequence form of SGPT (CVPR 2024)
with shared and per-sample (dynamic, e.g. selected group) prompts.

Sequence layout after every block: ``[prefix][slot 0][slot 1]...[patches]``. Each slot's tokens stay
contiguous, in the order of ``PromptSpec.slots``; an "insert" slot puts its newest tokens first. ViT blocks
are permutation-equivariant over tokens once position embeddings are added, so this order is bookkeeping
only and does not change any output.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from raysim.base.errors import ConfigError
from raysim.base.prompts import INITS, MODES, POOLINGS, PromptSlot, PromptSpec, xavier_prompt
from raysim.models.backbones import state_mismatches

# Everything of timm's VisionTransformer this module relies on (tests check each still exists).
TIMM_INTERNALS = (
    "patch_embed",
    "_pos_embed",
    "patch_drop",
    "norm_pre",
    "blocks",
    "norm",
    "forward_head",
    "fc_norm",
    "head_drop",
    "head",
    "reset_classifier",
    "num_prefix_tokens",
    "has_class_token",
    "embed_dim",
    "in_chans",
)


class PromptedViT(nn.Module):
    """A timm VisionTransformer with prompt slots and a fresh classifier.

    Parameter names: ``vit.*`` (backbone, ``vit.head.*`` the classifier), ``prompts.<slot>`` and
    ``extra.<name>`` (a method's own tensors, e.g. SGPT's keys and group-prompt bank).
    Blocks run one by one, so timm's gradient checkpointing and attention masks are not used.
    """

    def __init__(
        self,
        vit: VisionTransformer,
        spec: PromptSpec,
        num_classes: int,
        seed: int = 0,
        extras: dict[str, nn.Parameter] | None = None,
    ) -> None:
        """Wrap ``vit`` (modified in place: new head, frozen unless ``spec.train_backbone``).

        Args:
            vit: The backbone, e.g. from :func:`raysim.models.backbones.build_backbone`.
            spec: Prompt slots, head pooling and what trains.
            num_classes: Classes of the new head.
            seed: Seeds the head and prompt initialisation from the CPU generator, whose global state is
                restored afterwards. Wrap on CPU (as ``build_backbone`` returns it), then move the wrapper.
            extras: The method's own parameters; those with ``requires_grad`` train and are communicated.

        Raises:
            ConfigError: The spec does not fit this backbone.
        """
        super().__init__()
        _check_internals(vit)
        _validate(spec, vit, num_classes)
        self.vit = vit
        self.spec = spec
        self.prompts = nn.ParameterDict()
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)  # CPU only, like build_backbone
            vit.reset_classifier(num_classes)
            for slot in spec.slots:
                if not slot.dynamic:
                    self.prompts[slot.name] = nn.Parameter(_initial_prompt(slot, vit))
        self.extra = nn.ParameterDict(extras or {})
        vit.requires_grad_(spec.train_backbone)
        vit.head.requires_grad_(spec.train_head)
        self._trainable = tuple(sorted(name for name, p in self.named_parameters() if p.requires_grad))
        self._frozen_rows: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # slot -> (rows trained, held values)
        # per block: the (slot, index into slot.blocks) pairs whose tokens enter before it
        self._schedule = tuple(
            tuple((slot, slot.blocks.index(b)) for slot in spec.slots if b in slot.blocks)
            for b in range(len(vit.blocks))
        )

    def forward(
        self, x: torch.Tensor, dynamic: dict[str, torch.Tensor] | None = None, pre_logits: bool = False
    ) -> torch.Tensor:
        """Logits for images ``x`` ``[B, C, H, W]``; ``dynamic`` holds the tokens of dynamic slots. With
        ``pre_logits``, the head's input instead (the representation MOON contrasts)."""
        tokens, slices = self.forward_features(x, dynamic)
        return self.forward_head(tokens, slices, pre_logits=pre_logits)

    def forward_features(
        self, x: torch.Tensor, dynamic: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, slice]]:
        """Tokens after the final norm, and where each slot's final tokens sit in the sequence.

        Args:
            x: Images ``[B, C, H, W]``.
            dynamic: Slot name -> ``[B, len(blocks), length, D]`` for every dynamic slot, and nothing else.
        """
        tokens, sizes = self.run_blocks(self.embed(x), 0, len(self.vit.blocks), dynamic)
        return self.vit.norm(tokens), self._slices(sizes)

    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, int]]:
        """Patch and position embedding: the sequence before block 0, and the (empty) prompt segment sizes."""
        vit = self.vit
        return vit.norm_pre(vit.patch_drop(vit._pos_embed(vit.patch_embed(x)))), {s.name: 0 for s in self.spec.slots}

    def run_blocks(
        self,
        state: tuple[torch.Tensor, dict[str, int]],
        start: int,
        stop: int,
        dynamic: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, int]]:
        """Blocks ``start..stop-1`` on ``state`` (from :meth:`embed` or an earlier call), prompts entering as
        scheduled; a prefix computed once can branch into several continuations (FGPT-U)."""
        x, sizes = state[0], dict(state[1])
        self._check_dynamic(dynamic or {}, x.shape[0])
        for b in range(start, stop):
            for slot, k in self._schedule[b]:
                if not slot.dynamic or (dynamic and slot.name in dynamic):
                    x = self._enter(x, slot, self._slot_tokens(slot, k, x.shape[0], dynamic), sizes)
            x = self.vit.blocks[b](x)
        return x, sizes

    def head_from(
        self, state: tuple[torch.Tensor, dict[str, int]], pool: tuple[str, ...] | None = None
    ) -> torch.Tensor:
        """Logits from the output of the last block (final norm, then :meth:`forward_head`)."""
        return self.forward_head(self.vit.norm(state[0]), self._slices(state[1]), pool)

    def forward_head(
        self,
        tokens: torch.Tensor,
        slices: dict[str, slice],
        pool: tuple[str, ...] | None = None,
        pre_logits: bool = False,
    ) -> torch.Tensor:
        """Logits from :meth:`forward_features`' output, pooled as ``spec.head_pooling`` says, or, with
        ``pool``, as the mean of the class token and the outputs of the named slots (SGPT: CLS + group).
        ``pre_logits``: the classifier's input instead of its output."""
        vit = self.vit
        if pool is None and self.spec.head_pooling == "backbone":
            return vit.forward_head(_without(tokens, slices), pre_logits=pre_logits)
        if pool is None:
            pool = tuple(slices) if self.spec.head_pooling == "cls+prompts" else ()
        picked = [tokens[:, :1]] + [tokens[:, slices[name]] for name in pool]
        features = vit.head_drop(vit.fc_norm(torch.cat(picked, dim=1).mean(dim=1)))
        return features if pre_logits else vit.head(features)

    @contextmanager
    def training_only(self, names):
        """Within the block, only the trainable tensors in ``names`` require grad (block coordinate descent)."""
        params = dict(self.named_parameters())
        unknown = set(names) - set(self._trainable)
        if unknown:
            raise ValueError(f"not trainable tensors: {sorted(unknown)}")
        try:
            for name in self._trainable:
                params[name].requires_grad_(name in names)
            yield
        finally:
            for name in self._trainable:
                params[name].requires_grad_(True)

    def prompt_blocks(self) -> dict[str, tuple[int, ...]]:
        """Per trainable prompt tensor (``prompts.<slot>``), the block each of its rows enters."""
        return {f"prompts.{slot.name}": slot.blocks for slot in self.spec.slots if slot.name in self.prompts}

    @contextmanager
    def training_rows(self, rows: dict[str, torch.Tensor]):
        """Within the block, a trainable tensor named in ``rows`` trains only the rows (first dimension) its boolean
        mask marks (capacity tiers): a tensor with none stops requiring grad, and a prompt tensor's other rows enter
        the forward as the values it held when the block began or was last loaded (:meth:`load_trainable`), so the
        optimiser's weight decay on them never reaches the loss. Partial masks are for prompt tensors only."""
        params = dict(self.named_parameters())
        partial = {name: mask for name, mask in rows.items() if mask.any() and not mask.all()}
        if set(partial) - set(self.prompt_blocks()):
            raise ValueError(f"only prompt tensors can train some of their rows, not {sorted(partial)}")
        try:
            for name, mask in rows.items():
                params[name].requires_grad_(bool(mask.any()))
            self._frozen_rows = {name.split(".", 1)[1]: (mask.clone(), None) for name, mask in partial.items()}
            self._hold_frozen_rows()
            yield
        finally:
            self._frozen_rows = {}
            for name in self._trainable:
                params[name].requires_grad_(True)

    def _hold_frozen_rows(self) -> None:
        """Take the current values of the rows :meth:`training_rows` keeps fixed."""
        for slot, (mask, _) in self._frozen_rows.items():
            self._frozen_rows[slot] = (mask, self.prompts[slot].detach().clone())

    def offload(self, start: int, stop: int, stand_in: nn.Module) -> nn.ModuleList:
        """Split learning: blocks ``start..stop-1`` leave this model; ``stand_in`` (e.g. a
        :class:`raysim.split.RemoteEncoder`) runs in their place and what trains is recomputed.

        Returns:
            The removed blocks.
        """
        removed = nn.ModuleList(self.vit.blocks[b] for b in range(start, stop))
        self.vit.blocks[start] = stand_in
        for b in range(start + 1, stop):
            self.vit.blocks[b] = nn.Identity()
        self._trainable = tuple(sorted(name for name, p in self.named_parameters() if p.requires_grad))
        return removed

    def trainable_names(self) -> list[str]:
        """Sorted names (as in ``named_parameters()``) of what trains and is communicated."""
        return list(self._trainable)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Detached, contiguous copies of the trainable parameters."""
        params = dict(self.named_parameters())
        return {name: params[name].detach().clone(memory_format=torch.contiguous_format) for name in self._trainable}

    def load_trainable(self, state: dict[str, torch.Tensor]) -> None:
        """Copy ``state`` (as from :meth:`trainable_state`) into the trainable parameters in place.

        Raises:
            ValueError: Missing or unexpected names, or shape mismatches.
        """
        params = dict(self.named_parameters())
        problems = state_mismatches({name: params[name].shape for name in self._trainable}, state)
        if problems:
            raise ValueError(f"trainable state does not match the model: {problems}")
        with torch.no_grad():
            for name in self._trainable:
                params[name].copy_(state[name])
        self._hold_frozen_rows()

    def _slot_tokens(
        self, slot: PromptSlot, k: int, batch: int, dynamic: dict[str, torch.Tensor] | None
    ) -> torch.Tensor:
        """Tokens ``[B, length, D]`` that ``slot`` adds at its ``k``-th block."""
        if slot.dynamic:
            return dynamic[slot.name][:, k]
        trained, held = self._frozen_rows.get(slot.name, (None, None))
        source = held if trained is not None and not trained[k] else self.prompts[slot.name]
        return source[k].expand(batch, -1, -1)

    def _enter(self, x: torch.Tensor, slot: PromptSlot, new: torch.Tensor, sizes: dict[str, int]) -> torch.Tensor:
        """Put ``new`` at the start of ``slot``'s segment, replacing the old segment in "replace" mode."""
        start = self.vit.num_prefix_tokens
        for other in self.spec.slots:
            if other.name == slot.name:
                break
            start += sizes[other.name]
        dropped = sizes[slot.name] if slot.mode == "replace" else 0
        sizes[slot.name] += new.shape[1] - dropped
        return torch.cat([x[:, :start], new.to(x.dtype), x[:, start + dropped :]], dim=1)

    def _slices(self, sizes: dict[str, int]) -> dict[str, slice]:
        """Consecutive slices after the prefix, one per slot."""
        slices, start = {}, self.vit.num_prefix_tokens
        for name, size in sizes.items():
            slices[name] = slice(start, start + size)
            start += size
        return slices

    def _check_dynamic(self, dynamic: dict[str, torch.Tensor], batch: int) -> None:
        """Raise ValueError unless ``dynamic`` holds only dynamic slots, each with the right shape."""
        wanted = {
            slot.name: (batch, len(slot.blocks), slot.length, self.vit.embed_dim)
            for slot in self.spec.slots
            if slot.dynamic
        }
        if not dynamic.keys() <= wanted.keys():
            raise ValueError(f"dynamic prompts are for the dynamic slots {sorted(wanted)} only, got {sorted(dynamic)}")
        for name, shape in ((n, wanted[n]) for n in dynamic):
            if tuple(dynamic[name].shape) != shape:
                raise ValueError(f"dynamic prompts {name!r} must have shape {shape}, got {tuple(dynamic[name].shape)}")


def _check_internals(vit: nn.Module) -> None:
    missing = [name for name in TIMM_INTERNALS if not hasattr(vit, name)]
    if missing:
        raise ConfigError(
            f"{type(vit).__name__} lacks {', '.join(missing)} of timm's VisionTransformer; "
            "use a timm VisionTransformer backbone"
        )


def _validate(spec: PromptSpec, vit: VisionTransformer, num_classes: int) -> None:
    """Raise a one-line ConfigError for the first thing in ``spec`` that does not fit ``vit``."""
    if not _whole(num_classes) or num_classes < 1:
        raise ConfigError(f"num_classes must be a whole number at least 1, got {num_classes!r}")
    if spec.head_pooling not in POOLINGS:
        raise ConfigError(f"unknown head_pooling {spec.head_pooling!r}; valid: {', '.join(POOLINGS)}")
    if spec.head_pooling != "backbone" and not vit.has_class_token:
        raise ConfigError(f"head_pooling {spec.head_pooling!r} needs a class token; use head_pooling 'backbone'")
    depth = len(vit.blocks)
    names = [slot.name for slot in spec.slots]
    for slot in spec.slots:
        where = f"prompt slot {slot.name!r} (backbone depth {depth})"
        if not slot.name.isidentifier() or hasattr(nn.ParameterDict(), slot.name):
            raise ConfigError(f"{where}: the name must be an identifier such as 'deep', and no attribute of a module")
        if names.count(slot.name) > 1:
            raise ConfigError(f"{where}: the name is used twice; give each slot its own name")
        blocks = tuple(slot.blocks)
        in_range = bool(blocks) and all(_whole(b) and 0 <= b < depth for b in blocks)
        if not in_range or any(a >= b for a, b in zip(blocks, blocks[1:])):
            raise ConfigError(
                f"{where}: blocks {blocks} must be non-empty, strictly increasing indices in [0, {depth})"
            )
        if not _whole(slot.length) or slot.length < 1:
            raise ConfigError(f"{where}: length must be a whole number at least 1, got {slot.length!r}")
        if slot.mode not in MODES:
            raise ConfigError(f"{where}: unknown mode {slot.mode!r}; valid: {', '.join(MODES)}")
        if slot.init not in INITS:
            raise ConfigError(f"{where}: unknown init {slot.init!r}; valid: {', '.join(INITS)}")


def _whole(value) -> bool:
    """Whether ``value`` is an int (a bool is not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _initial_prompt(slot: PromptSlot, vit: VisionTransformer) -> torch.Tensor:
    """``[len(blocks), length, D]`` initial tokens from the current (seeded) CPU RNG, on ``vit``'s device."""
    shape = (len(slot.blocks), slot.length, vit.embed_dim)
    prompt = xavier_prompt(vit, shape) if slot.init == "xavier" else torch.zeros(shape)
    if slot.init == "normal":
        prompt.normal_(std=0.02)
    reference = vit.head.weight
    return prompt.to(device=reference.device, dtype=reference.dtype)


def _without(tokens: torch.Tensor, slices: dict[str, slice]) -> torch.Tensor:
    """``tokens`` with the positions in ``slices`` removed along the sequence."""
    pieces, position = [], 0
    for start, stop in sorted((s.start, s.stop) for s in slices.values()):
        pieces.append(tokens[:, position:start])
        position = stop
    pieces.append(tokens[:, position:])
    return torch.cat(pieces, dim=1)
