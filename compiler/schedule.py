"""Schedules as data: the decisions that turn an op (or a fused chain) into a kernel, as primitives.

A Schedule holds one block per kernel of the chain (L0, L1 ...: a conv2d / dense with
the relu / clip / residual add it absorbs, or one pooling or elementwise op).  A
block is a nest of tile loops around one tile that `tensorize` maps onto the unit's
commands.  The primitives say what to do, check that it can be done (a CompileError
quoting the bad value otherwise), and record themselves in a trace:

    im2col("x")                  gather a conv's whole window into the NU's input rows (a 1x1
                                 conv over an im2col-like IBUF tile; first, before the rest)
    split(axis, factor)          tile an axis: it becomes the tile loop `axis.o` around
                                 tiles of `factor` (conv: n oc oh ow ic; pool: n c oh;
                                 elementwise: n c r, c and r fused first)
    reorder(*loops)              the order of the tile loops
    fuse(*names)                 fuse axes (elementwise c, r) or adjacent tile loops (to
                                 deal their tiles over units with `parallel`)
    cache_read(tensor, scope, name) / cache_write(tensor, scope, name)
                                 a DMA into (out of) the local buffer `name` in `scope`
    compute_at(cache, "root")    load a cache once for the whole kernel (resident weights)
    double_buffer(cache, depth)  `depth` rotating slots, so loads overlap compute
    tensorize(stage, intrinsic)  a stage onto nu.conv, a DMA or a VU command
    parallel(loop, units)        deal a tile loop's tiles over `units` NUs (VUs)
    buffer_split / buffer_reorder / buffer_pad (the weight "w")
                                 its stored layout: the steps compose into one
                                 isa_spec.layout spec whose forward transform is folded
                                 into the stored constant at compile time

The lowering (compiler.lowering) carries a checked schedule out: `choices()` gives it
one NuChoice / VuChoice per block (tile sizes, weights resident or streamed, bias
mode, units, buffer names and slots, weight layout), the same decisions the
automatic search makes.  `str(schedule)` is Python text that rebuilds it
(`Schedule.from_trace(text, *ops)`), and compiler.search.all_candidates(ops, config) lists the
schedules the automatic search ranks.
"""
from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from isa_spec.layout import LayoutError, from_stored, parse_layout, stored_shape, to_stored
from nnpsim.config import Config

from .errors import CompileError
from .ops import Conv2d, Dense, Op, Pool2d, Softmax
from .lowering import driver
from .lowering.layout import bias_blocks, conv_view, fold_taps
from .lowering.conv_plan import ConvTiling, buffer_needs, fits, requantises_on_nu
from .lowering.nu import plan
from .lowering.units import shared_capacity
from .lowering.movement import is_movement
from .lowering.vu import binary_command, elementwise_ncr, elementwise_tiles, pool_engines
from .sizes import capacities

PRIMITIVES = ("im2col", "split", "reorder", "fuse", "cache_read", "cache_write", "compute_at", "double_buffer",
              "tensorize", "parallel", "buffer_split", "buffer_reorder", "buffer_pad")
MAX_DEPTH = 4       # slots a cache may rotate through (the loops pass rolls rotations up to four)

# (tensor, scope) -> the lowering's buffer role, and each role's fewest slots (the pipeline issues
# tile k+1's loads before tile k's compute, and tile k's epilogue after tile k+1's compute)
NU_CACHES = {("x", "ibuf"): "in", ("w", "wbuf"): "wt", ("y", "abuf"): "acc", ("y", "vbuf"): "vacc",
             ("b", "vbuf"): "res"}
POOL_CACHES = {("x", "vbuf"): "in", ("y", "vbuf"): "out"}
ELEMENTWISE_CACHES = {("x", "vbuf"): "a", ("a", "vbuf"): "a", ("b", "vbuf"): "b"}
MOVEMENT_CACHES: dict = {}      # a movement block's tiles and slots are the lowering's own (lowering.movement, .softmax)
RQ_INTRINSICS = ("nu.conv.rq", "nu.conv.acc.rq")
"""The NU's output stage: the whole sum in one command a tile, or the last chunk's adding the others'."""
FDW_INTRINSIC = "nu.fdwconv"
"""A float-mode depthwise conv's one command: its conv, its bias (stored with its weights) and its quantisation."""
TO_VBUF = ("nu.conv.rq", FDW_INTRINSIC)
"""The conv intrinsics whose int8 result goes straight to VBUF: no ABUF cache."""
MIN_DEPTH = {"nu": {"in": 2, "wt": 2, "acc": 2, "vacc": 1, "res": 1},
             "pool": {"in": 2, "out": 2}, "elementwise": {"a": 3, "b": 2}, "movement": {}}
WHY_DEPTH = {"in": "its loads for tile k+1 are issued before tile k's compute",
             "wt": "its loads for tile k+1 are issued before tile k's compute",
             "acc": "tile k+1's compute is issued before tile k's drain",
             "a": "a tile is loaded, computed in place and stored, and tile k+1's load and tile k-1's store "
                  "are issued around tile k's compute",
             "b": "its loads for tile k+1 are issued before tile k's compute",
             "out": "tile k+1's compute is issued before tile k's store"}
BIAS_INTRINSICS = {"dma": "fill", "vu.requant": "requant", "nu.conv": "nu"}


def _fail(msg: str):
    raise CompileError(msg)


@dataclass
class Cache:
    """A local copy of a tensor: where it lives and which buffer role of the lowering it is."""

    tensor: str
    scope: str
    role: str


@dataclass
class Block:
    """One kernel of the chain and the decisions made for it so far."""

    name: str
    kind: str                              # "nu", "pool", "elementwise" or "movement" (also softmax: own tiles)
    seg: tuple[Op, ...]
    extents: dict[str, int]
    quantum: dict[str, int]                # split factors must be multiples of these (NU blocks of channels)
    ctx: dict                              # derived once per op and shared by copies (plan, residual ...)
    factors: dict[str, int] = field(default_factory=dict)
    fused_axes: tuple[str, ...] = ()
    loops: list[str] = field(default_factory=lambda: ["n"])
    caches: dict[str, Cache] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)
    at_root: set[str] = field(default_factory=set)
    intrinsics: dict[str, str] = field(default_factory=dict)
    parallel: tuple[str, int] | None = None
    layout: list[str] = field(default_factory=list)
    fused: dict[str, list[str]] = field(default_factory=dict)     # a fused tile loop -> its loops

    # ------------------------------------------------------------------ views

    def where(self) -> str:
        """The block as error messages name it."""
        return f"block {self.name} ({' + '.join(o.kind for o in self.seg)})"

    def axes(self) -> tuple[str, ...]:
        """The axes a split may name now (elementwise c and r become c+r once fused)."""
        if self.kind == "elementwise" and self.fused_axes:
            return ("n", "+".join(self.fused_axes))
        return tuple(self.extents)

    def tensors(self) -> tuple[str, ...]:
        """The tensors of the block: its inputs, the weight (NU) and the output y."""
        if self.kind == "nu":
            return ("x", "w", "y") + (("b",) if self.ctx["residual"] is not None else ())
        return tuple(t.name for t in self.seg[0].inputs) + ("y",)

    def stages(self) -> dict[str, tuple[str, ...]]:
        """Each stage that must be tensorized and the intrinsics it can go onto."""
        if self.kind == "nu":
            v = self.ctx["plan"].view
            if self.ctx["plan"].depthwise and v.fmode is not None:
                out = {s: (FDW_INTRINSIC,) for s in ("conv", "requant") + (("bias",) if v.bias is not None else ())}
                if self.ctx["residual"] is not None:
                    out["add"] = (self.ctx["residual"].mnemonic,)
                return out
            if self.ctx["plan"].depthwise:
                # the NU's depthwise mode starts its accumulators at the biases stored with the weights
                out = {"conv": ("nu.dwconv",)}
                if v.bias is not None:
                    out["bias"] = ("nu.dwconv",)
            else:
                out = {"conv": ("nu.conv",)}
                if v.bias is not None:
                    out["bias"] = tuple(k for k in BIAS_INTRINSICS if k != "nu.conv" or self.ctx["bias_blocks"])
            per_channel = self.intrinsics.get("bias") == "vu.requant"
            f = v.scale is not None
            out["requant"] = (("vu.requant.f" if f else "vu.requant") if per_channel
                              else ("vu.requant.fpc" if f else "vu.requant.pc"),)
            # the NU's output stage: it takes the bias too, and with ic split adds the other chunks'
            # partial sums (nu.conv.acc.rq; check() says which one the split allows)
            if requantises_on_nu(self.ctx["plan"]):
                stage = self.intrinsics.get("requant")
                if stage in RQ_INTRINSICS:
                    if stage == "nu.conv.rq":      # one command does all three
                        out["conv"] = ("nu.conv.rq",)
                    out["requant"] = (stage,)
                    if v.bias is not None:
                        out["bias"] = (stage,)
                elif not per_channel:
                    out["requant"] += RQ_INTRINSICS
            if self.ctx["residual"] is not None:
                out["add"] = (self.ctx["residual"].mnemonic,)
            return out
        if self.kind == "movement":
            return {}
        op = driver.fold_clamps(self.seg)
        if isinstance(op, Pool2d):
            out = {"pool": pool_engines(op)}
            if op.mode == "avg" and op.is_float and op.is_global:
                out["scale"] = ("vu.requant.f",)
            return out
        if op.mode == "clip":
            return {"clip": ("vu.clip",)}
        if op.mode == "lut":
            return {"lut": ("vu.lut",)}
        if op.binary:
            return {op.mode: (binary_command(op)[0],)}
        if op.mode == "batch_norm":
            return {"batch_norm": ("vu.faffine",)}
        per_channel = np.ndim(op.scale if op.scale is not None else op.ma) > 0
        if op.scale is not None:
            return {"requantize": ("vu.requant.fpc" if per_channel else "vu.requant.f",)}
        return {"requantize": ("vu.requant.pc" if per_channel else "vu.requant",)}

    def rq_intrinsic(self) -> str:
        """The NU's output stage for this tiling: nu.conv.rq, or nu.conv.acc.rq when ic is split (nu.fdwconv for
        a float-mode depthwise conv)."""
        p, f = self.ctx["plan"], self.factors
        if p.depthwise and p.view.fmode is not None:
            return FDW_INTRINSIC
        return "nu.conv.acc.rq" if "ic" in f and f["ic"] // p.rows < p.w.span else "nu.conv.rq"

    def loop_extent(self, loop: str) -> int:
        """How many tiles a tile loop runs over."""
        if loop in self.fused:
            return int(np.prod([self.loop_extent(p) for p in self.fused[loop]]))
        if not loop.endswith(".o"):
            return self._extent(loop)
        axis = loop[:-2]
        if self.kind == "elementwise":
            return len(elementwise_tiles(driver.fold_clamps(self.seg), self.factors[axis])) // self.extents["n"]
        return -(-self._extent(axis) // self.factors[axis])

    def _extent(self, axis: str) -> int:
        if axis in self.extents:
            return self.extents[axis]
        return int(np.prod([self.extents[a] for a in axis.split("+")]))

    def spatial_loops(self) -> list[str]:
        """The NU block's spatial tile loops, fused or not (n, then oh.o and ow.o when split)."""
        return ["n"] + [f"{a}.o" for a in ("oh", "ow") if a in self.factors]

    def cache_named(self, name: str, what: str) -> Cache:
        if name not in self.caches:
            known = ", ".join(repr(k) for k in self.caches) or "none yet"
            _fail(f"{what}: {self.where()} has no cache {name!r} (caches: {known})")
        return self.caches[name]

    def role_cache(self, role: str) -> str | None:
        """The name of the cache that plays a lowering role, if any."""
        return next((n for n, c in self.caches.items() if c.role == role), None)

    # ------------------------------------------------------------------ the lowering's view

    def tiling(self) -> ConvTiling:
        """The NU block's tiling: tile sizes, weights resident or streamed, bias mode."""
        p = self.ctx["plan"]
        f = self.factors
        th = f.get("oh", p.oh)
        tw = f.get("ow", p.ow)
        obt = f["oc"] // p.cols if "oc" in f else p.n_ob
        cbt = min(p.w.span, f["ic"] // p.rows) if "ic" in f else p.w.span
        w = self.role_cache("wt")
        drain = "nu" if self.intrinsics.get("requant") in RQ_INTRINSICS + (FDW_INTRINSIC,) else "vu"
        bias = BIAS_INTRINSICS.get(self.intrinsics.get("bias", "dma"), "fill")   # nu.dwconv, nu.conv.rq: their own
        return ConvTiling(th, tw, obt, cbt, w in self.at_root, bias, drain)

    def check(self, cfg: Config) -> None:
        """Everything the lowering needs is decided and consistent; CompileError says what is not."""
        where = self.where()
        needed = {"nu": NU_CACHES, "pool": POOL_CACHES, "elementwise": ELEMENTWISE_CACHES, "movement": MOVEMENT_CACHES}[self.kind]
        roles = {c.role for c in self.caches.values()}
        if self.kind == "nu" and self.intrinsics.get("requant") in TO_VBUF:
            needed = {k: r for k, r in needed.items() if r != "acc"}     # the result goes straight to VBUF
        for (tensor, scope), role in needed.items():
            if role not in roles and tensor in self.tensors():
                _fail(f"{where}: {tensor!r} is not cached in {scope}: call cache_"
                      f"{'write' if tensor == 'y' else 'read'}({tensor!r}, {scope!r}, name)")
        for name, c in self.caches.items():
            # nu.conv.acc.rq's partial sums: only the NU touches them, in order (conv_plan.role_depths)
            psum = c.role == "acc" and self.intrinsics.get("requant") == "nu.conv.acc.rq"
            least = 1 if name in self.at_root or psum else MIN_DEPTH[self.kind][c.role]
            if self.depths.get(name, 1) < least:
                _fail(f"{where}: cache {name!r} needs double_buffer({name!r}, depth={least}) at least: "
                      f"{WHY_DEPTH[c.role]}")
        for stage, allowed in self.stages().items():
            if stage not in self.intrinsics:
                _fail(f"{where}: stage {stage!r} is not tensorized: call tensorize({stage!r}, {allowed[0]!r})")
            if self.intrinsics[stage] not in allowed:
                _fail(f"{where}: stage {stage!r} is tensorized onto {self.intrinsics[stage]!r}, which no longer "
                      f"fits: it takes {' or '.join(allowed)}")
        if self.kind == "elementwise" and not self.fused_axes:
            _fail(f"{where}: the elementwise lowering tiles the fused c+r axis: call fuse('c', 'r')")
        if self.kind != "nu":
            return
        t = self.tiling()
        if self.intrinsics.get("requant") == "nu.conv.acc.rq" and t.cbt >= self.ctx["plan"].w.span:
            _fail(f"{where}: nu.conv.acc.rq adds the partial sums of earlier input-channel chunks, but ic is not "
                  f"split: tensorize('requant', 'nu.conv.rq'), or split('ic', ...)")
        if t.drain == "nu" and "acc" in roles and t.cbt >= self.ctx["plan"].w.span:
            _fail(f"{where}: nu.conv.rq writes its int8 result to VBUF: drop the ABUF cache "
                  f"{self.role_cache('acc')!r}")
        if self.intrinsics.get("requant") == "nu.conv.rq" and t.cbt < self.ctx["plan"].w.span:
            _fail(f"{where}: nu.conv.rq requantises the whole sum, but ic is split by {self.factors['ic']}: "
                  f"tensorize('requant', 'nu.conv.acc.rq')")
        if t.resident:
            if "ic" in self.factors:
                _fail(f"{where}: resident weights are one chunk, but ic is split by {self.factors['ic']}")
            if "oc.o" in self.loops and self.loops[-1] != "oc.o":
                _fail(f"{where}: with the weights resident the lowering runs the output-channel groups "
                      f"innermost (each input tile is loaded once for all of them), but the loops are "
                      f"{self.loops}: reorder({', '.join(repr(l) for l in self.loops if l != 'oc.o')}, 'oc.o')")
        elif "oc.o" in self.loops and self.loops[0] != "oc.o":
            _fail(f"{where}: with the weights streamed the output-channel groups are the outermost loop "
                  f"(each group's weights load once), but the loops are {self.loops}: "
                  f"compute_at({self.role_cache('wt')!r}, 'root') to keep every weight on chip")
        if self.ctx["default_layout"]:
            shape = self.ctx["plan"].view.weight.shape
            want = Layout(" ".join(self.ctx["default_layout"]), shape).stored_shape
            got = self.weight_layout().stored_shape
            if got != want:
                steps = "; ".join(f"buffer_{st.split('(')[0]}('w', {st.split('(')[1][:-1].replace(',', ', ')})"
                                  for st in self.ctx["default_layout"])
                _fail(f"{where}: the weight [O, C, KH, KW] = {list(shape)} is stored as {list(got)}, but nu.conv "
                      f"reads [out_cb, in_cb, k_h, k_w, rows, cols] = {list(want)} (for instance: {steps})")
        depths = self.lowering_depths()
        caps = capacities(shared_capacity(cfg, self.parallel[1], "nu") if self.parallel else cfg)
        needs = buffer_needs(self.ctx["plan"], t, self.ctx["residual"] is not None, depths)
        if not fits(needs, caps):
            worst = max(needs, key=lambda k: needs[k] / caps[k])
            _fail(f"{where}: the tile {t.th} x {t.tw} pixels x {t.obt * self.ctx['plan'].cols} channels "
                  f"needs {needs[worst]} bytes of {worst}, more than its {caps[worst]}")

    def lowering_depths(self) -> dict[str, int]:
        """Slots per buffer role: the double_buffer depth, else one (a cache loaded once has none)."""
        return {c.role: self.depths.get(n, 1) for n, c in self.caches.items() if n not in self.at_root}

    def choice(self, cfg: Config) -> driver.NuChoice | driver.VuChoice:
        """The decisions as the lowering takes them (driver.NuChoice / driver.VuChoice)."""
        self.check(cfg)
        roles = {c.role: n for n, c in self.caches.items()}
        if self.kind == "nu":
            if self.role_cache("wt") in self.at_root:
                roles["wres"] = roles.pop("wt")
            p = self.ctx["plan"]
            if self.layout != self.ctx["default_layout"]:
                p = plan(p.view, cfg, self.weight_layout().spec)
            by, units = None, 1
            if self.parallel:
                loop, units = self.parallel
                by = "channel" if loop == "oc.o" else "spatial"
            return driver.NuChoice(p, self.tiling(), self.ctx["residual"], by, units, roles, self.lowering_depths())
        if self.kind == "movement":
            return driver.VuChoice()
        op = driver.fold_clamps(self.seg)
        if isinstance(op, Pool2d):
            tile = (self.factors.get("c", op.x_shape[1]), self.factors.get("oh", op.out_hw[0]))
        else:
            fused = "+".join(self.fused_axes)
            tile = self.factors.get(fused, self._extent(fused))
        units = self.parallel[1] if self.parallel else 1
        return driver.VuChoice(tile, units, roles, self.lowering_depths(), self.intrinsics.get("pool"))

    def weight_layout(self) -> "Layout":
        """The weight's stored layout: the composed layout steps."""
        return Layout(" ".join(self.layout), self.ctx["plan"].view.weight.shape)


@dataclass(frozen=True)
class Layout:
    """A stored layout (isa_spec.layout spec) of a logical array of `shape`: forward and inverse."""

    spec: str
    shape: tuple[int, ...]

    def forward(self, logical: np.ndarray) -> np.ndarray:
        """The stored array of a logical one."""
        return to_stored(self.spec, logical)

    def inverse(self, stored: np.ndarray) -> np.ndarray:
        """The logical array back from its stored form (the padding dropped)."""
        return from_stored(self.spec, stored, self.shape)

    @property
    def stored_shape(self) -> tuple[int, ...]:
        """The shape of the stored array."""
        return _stored_shape(self.spec, self.shape)


@lru_cache(maxsize=1 << 12)
def _stored_shape(spec: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    # the search gives thousands of candidate schedules the same few weight layouts
    return tuple(stored_shape(spec, shape))


@lru_cache(maxsize=1 << 12)
def _step_error(step: str, shape: tuple[int, ...]) -> str:
    """Why a layout step does not apply to a stored weight of `shape` ('' if it does)."""
    try:
        parse_layout(step)
        stored_shape(step, shape)
    except LayoutError as exc:
        return str(exc).split(': ', 1)[-1]
    return ""


def _block(name: str, seg: tuple[Op, ...], cfg: Config, taps: bool = False) -> Block:
    if isinstance(seg[0], (Conv2d, Dense)):
        nu_op, residual, _ = driver.fuse_nu_chain(seg)
        p = plan(fold_taps(conv_view(nu_op), cfg.nu_rows) if taps else conv_view(nu_op, cfg.nu_rows), cfg)
        v = p.view
        ext = {"n": v.x_shape[0], "oc": v.y_shape[1], "oh": p.oh, "ow": p.ow,
               "ic": min(v.in_channels, p.w.span * p.rows)}
        bb = bias_blocks(v.bias, v.x_zp, p.n_ob, p.rows, p.cols) is not None if v.bias is not None else False
        default = ([f"split(0,{p.cols})", f"split(2,{p.rows})", "reorder(0,2,4,5,3,1)"] if p.w.layout else [])
        return Block(name, "nu", seg, ext, {"oc": p.cols, "ic": p.rows},
                     {"plan": p, "residual": residual, "bias_blocks": bb, "default_layout": default})
    if is_movement(seg[0]) or isinstance(seg[0], Softmax):     # tiles of their own lowering's choosing
        return Block(name, "movement", seg, {"n": 1}, {}, {})
    op = driver.fold_clamps(seg)
    if isinstance(op, Pool2d):
        n, c, _, _ = op.x_shape
        return Block(name, "pool", seg, {"n": n, "c": c, "oh": op.out_hw[0]}, {}, {})
    n, c, r = elementwise_ncr(op)
    return Block(name, "elementwise", seg, {"n": n, "c": c, "r": r}, {}, {})


def _literal(v) -> str:
    return repr(tuple(v)) if isinstance(v, list) else repr(v)


class Schedule:
    """The schedule of one op or a fused chain: blocks L0, L1 ... and the primitives that decide them.

    Schedule(*ops, config=None) starts with nothing decided; the primitives act on block
    "L0" unless given block="L1" ... .  str() is the trace: Python text from_trace rebuilds.
    """

    def __init__(self, *ops: Op, config: Config | None = None, segments: list | None = None):
        for k, o in enumerate(ops):
            if not isinstance(o, Op):
                _fail(f"argument {k} is not an op from compiler.ops: {o!r}")
        if not ops:
            _fail("a Schedule needs at least one op")
        self.ops = tuple(ops)
        self.config = (config or Config()).validate()
        segs = driver.segments(self.ops) if segments is None else segments
        self.blocks = [_block(f"L{k}", seg, self.config) for k, seg in enumerate(segs)]
        self.trace: list[tuple[str, tuple, dict]] = []

    # ------------------------------------------------------------------ plumbing

    def block(self, name: str = "L0") -> Block:
        """The block of that name."""
        for b in self.blocks:
            if b.name == name:
                return b
        _fail(f"no block {name!r}: this schedule has {', '.join(b.name for b in self.blocks)}")

    def fork(self) -> "Schedule":
        """A copy to decide further on (sharing what was derived from the ops)."""
        new = copy.copy(self)
        new.blocks = []
        for b in self.blocks:
            nb = copy.copy(b)
            for f in ("factors", "depths", "caches", "intrinsics"):
                setattr(nb, f, dict(getattr(b, f)))
            nb.loops, nb.layout, nb.at_root = list(b.loops), list(b.layout), set(b.at_root)
            nb.fused = {k: list(v) for k, v in b.fused.items()}
            new.blocks.append(nb)
        new.trace = list(self.trace)
        return new

    def _record(self, name: str, args: tuple, block: str) -> None:
        self.trace.append((name, args, {"block": block} if block != "L0" else {}))

    def __str__(self) -> str:
        head = [f"# schedule of {' -> '.join(o.kind for o in self.ops)}: "
                + ", ".join(f"{b.name} = {' + '.join(o.kind for o in b.seg)}" for b in self.blocks)]
        lines = []
        for name, args, kw in self.trace:
            parts = [_literal(a) for a in args] + [f"{k}={v!r}" for k, v in kw.items()]
            lines.append(f"s.{name}({', '.join(parts)})")
        return "\n".join(head + lines) + "\n"

    def __repr__(self) -> str:
        return f"<Schedule of {' -> '.join(o.kind for o in self.ops)}: {len(self.trace)} steps>"

    @classmethod
    def from_trace(cls, text: str, *ops: Op, config: Config | None = None) -> "Schedule":
        """Rebuild a schedule from its text (str(schedule)) for ops of the same shapes."""
        s = cls(*ops, config=config)
        if not isinstance(text, str):
            _fail(f"a schedule trace is text (str(schedule)), not {type(text).__name__}")
        try:
            tree = ast.parse(text)
        except SyntaxError as exc:
            _fail(f"schedule trace line {exc.lineno}: {exc.msg}")
        for stmt in tree.body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == "s"):
                _fail(f"schedule trace line {stmt.lineno}: expected a call s.<primitive>(...), got "
                      f"{ast.get_source_segment(text, stmt)!r}")
            name = call.func.attr
            if name not in PRIMITIVES:
                _fail(f"schedule trace line {stmt.lineno}: {name!r} is not a primitive ({', '.join(PRIMITIVES)})")
            try:
                args = [ast.literal_eval(a) for a in call.args]
                kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            except ValueError:
                _fail(f"schedule trace line {stmt.lineno}: arguments must be literals: "
                      f"{ast.get_source_segment(text, call)!r}")
            try:
                getattr(s, name)(*args, **kw)
            except CompileError as exc:
                _fail(f"schedule trace line {stmt.lineno}: {exc}")
            except TypeError as exc:
                _fail(f"schedule trace line {stmt.lineno}: {exc}")
        return s

    def replay(self, *ops: Op, config: Config | None = None, segments: list | None = None) -> "Schedule":
        """The same decisions for other ops (of the same shapes); CompileError if they do not fit them."""
        s = Schedule(*ops, config=config, segments=segments)
        mine = [(b.kind, tuple(o.kind for o in b.seg)) for b in self.blocks]
        theirs = [(b.kind, tuple(o.kind for o in b.seg)) for b in s.blocks]
        if mine != theirs:
            _fail(f"the schedule is for {' -> '.join(o.kind for o in self.ops)}, not for "
                  f"{' -> '.join(o.kind for o in ops)}")
        for name, args, kw in self.trace:
            try:
                getattr(s, name)(*args, **kw)
            except CompileError as exc:
                _fail(f"the schedule does not fit these ops on this machine: s.{name}{tuple(args)}: {exc}")
        return s

    def check(self) -> None:
        """Every block fully decided and consistent (CompileError otherwise)."""
        for b in self.blocks:
            b.check(self.config)

    def choices(self) -> list:
        """What the lowering needs of each block, in order (checked)."""
        return [b.choice(self.config) for b in self.blocks]

    # ------------------------------------------------------------------ loop primitives

    def im2col(self, tensor: str = "x", *, block: str = "L0") -> "Schedule":
        """Gather the conv's whole window into the input rows (layout.fold_taps): the NU then runs a
        1x1 conv over an im2col-like IBUF tile.  First, before any other decision on the block."""
        b = self.block(block)
        what = f"im2col({tensor!r})"
        if b.kind != "nu" or tensor != "x" or not isinstance(b.seg[0], Conv2d):
            _fail(f"{what}: only a conv2d's input x can be gathered tap by tap ({b.where()})")
        if b.ctx["plan"].view.taps is not None:
            _fail(f"{what}: {b.where()} already gathers its taps")
        if b.factors or b.caches or b.intrinsics or b.layout or b.parallel:
            _fail(f"{what}: the fold changes the block's channels and window: call it first")
        live = driver.fuse_nu_chain(b.seg)[0]
        if fold_taps(conv_view(live), self.config.nu_rows) is None:
            _fail(f"{what}: the window's taps cannot be folded into the NU's {self.config.nu_rows} rows "
                  f"(groups = {live.groups}, [O, C/groups, KH, KW] = {list(live.weight.shape)} without the taps "
                  f"that read only padding: it takes groups = 1, a window of more than one tap and C <= "
                  f"{self.config.nu_rows}; in the float mode C * KH * KW <= {self.config.nu_rows} and no tap "
                  f"that reads only padding)")
        folded = _block(b.name, b.seg, self.config, taps=True)
        b.extents, b.quantum, b.ctx = folded.extents, folded.quantum, folded.ctx
        self._record("im2col", (tensor,), block)
        return self

    def split(self, axis: str, factor: int, *, block: str = "L0") -> "Schedule":
        """Tile `axis` by `factor`: the tile loop `axis.o` runs over tiles of `factor` along it."""
        b = self.block(block)
        what = f"split({axis!r}, {factor!r})"
        if axis not in b.axes():
            _fail(f"{what}: {b.where()} has no axis {axis!r} (axes: {', '.join(b.axes())})")
        if axis in b.factors:
            _fail(f"{what}: {axis!r} is already split by {b.factors[axis]}")
        if not isinstance(factor, (int, np.integer)) or isinstance(factor, bool) or factor < 1:
            _fail(f"{what}: the factor must be a positive integer, got {factor!r}")
        factor = int(factor)
        if axis == "n":
            _fail(f"{what}: the batch is already one image per tile")
        ext = b._extent(axis)
        if factor >= ext:
            _fail(f"{what}: {axis!r} has {ext}, so a tile of {factor} is all of it: split by less")
        q = b.quantum.get(axis, 1)
        if factor % q:
            _fail(f"{what}: {axis!r} is tiled in whole blocks of {q} channels (the NU array's "
                  f"{'columns' if axis == 'oc' else 'rows'}), and {factor} is not a multiple of {q}")
        if b.kind == "nu" and axis == "ic" and b.role_cache("wt") in b.at_root:
            _fail(f"{what}: the weights are resident (one chunk): ic cannot be split")
        b.factors[axis] = factor
        loop = f"{axis}.o"
        canon = {"nu": ["oc.o", "n", "oh.o", "ow.o", "ic.o"], "pool": ["n", "c.o", "oh.o"]}.get(b.kind)
        if canon is None:
            b.loops.append(loop)
        else:
            rank = {l: k for k, l in enumerate(canon)}
            pos = next((k for k, l in enumerate(b.loops) if "+" not in l and rank.get(l, 0) > rank[loop]),
                       len(b.loops))
            if loop == "oc.o" and b.role_cache("wt") in b.at_root:
                pos = len(b.loops)
            b.loops.insert(pos, loop)
        self._record("split", (axis, factor), block)
        return self

    def reorder(self, *loops: str, block: str = "L0") -> "Schedule":
        """Put the tile loops in this order (outermost first)."""
        b = self.block(block)
        what = f"reorder({', '.join(repr(l) for l in loops)})"
        if sorted(loops) != sorted(b.loops):
            _fail(f"{what}: name every tile loop of {b.where()} once: {b.loops}")
        if b.kind != "nu":
            if list(loops) != b.loops:
                _fail(f"{what}: the {b.kind} lowering walks its tiles in the order {b.loops} only")
        else:
            spatial = [l for l in loops if l in ("n", "oh.o", "ow.o")]
            if spatial != [l for l in ("n", "oh.o", "ow.o") if l in loops]:
                _fail(f"{what}: the spatial tile loops run n, oh.o, ow.o in that order")
            if "ic.o" in loops and loops[-1] != "ic.o":
                _fail(f"{what}: ic.o (the input-channel chunks accumulated into one tile) must be innermost")
            if "oc.o" in loops and loops.index("oc.o") not in (0, len([l for l in loops if l != "ic.o"]) - 1):
                _fail(f"{what}: oc.o goes outermost (streamed weights: each group's weights load once) or "
                      "innermost (resident weights: each input tile loads once for every group)")
        b.loops = list(loops)
        self._record("reorder", loops, block)
        return self

    def fuse(self, *names: str, block: str = "L0") -> "Schedule":
        """Fuse axes (an elementwise op's c and r, before splitting) or adjacent tile loops (into one)."""
        b = self.block(block)
        what = f"fuse({', '.join(repr(n) for n in names)})"
        if len(names) < 2:
            _fail(f"{what}: fuse takes two or more names")
        if b.kind == "elementwise" and tuple(names) == ("c", "r"):
            if b.fused_axes:
                _fail(f"{what}: c and r are already fused")
            b.fused_axes = ("c", "r")
        else:
            k = b.loops.index(names[0]) if names[0] in b.loops else -1
            if k < 0 or tuple(b.loops[k:k + len(names)]) != tuple(names):
                _fail(f"{what}: these are not adjacent tile loops of {b.where()} (loops: {b.loops}"
                      + ("; an elementwise op fuses its axes as fuse('c', 'r')" if b.kind == "elementwise" else "")
                      + ")")
            if b.kind == "nu" and not set(names) <= {"n", "oh.o", "ow.o"}:
                _fail(f"{what}: the NU lowering can fuse only the spatial tile loops n, oh.o, ow.o")
            b.fused["+".join(names)] = list(names)
            b.loops[k:k + len(names)] = ["+".join(names)]
        self._record("fuse", names, block)
        return self

    def parallel(self, loop: str, units: int, *, block: str = "L0") -> "Schedule":
        """Deal the tiles of `loop` round robin over `units` NUs (conv2d / dense) or VUs."""
        b = self.block(block)
        cfg = self.config
        what = f"parallel({loop!r}, {units!r})"
        have = cfg.nu_count if b.kind == "nu" else cfg.vu_count
        unit = "NU" if b.kind == "nu" else "VU"
        if have < 2:
            _fail(f"{what}: the machine has one {unit} (Config {unit.lower()}_count = 1): nothing to spread over")
        if not isinstance(units, int) or isinstance(units, bool) or not 2 <= units <= have:
            _fail(f"{what}: the machine has {have} {unit}s; units must be 2..{have}")
        if b.parallel:
            _fail(f"{what}: {b.where()} is already parallel over {b.parallel[0]!r}")
        if b.kind == "nu":
            spatial = b.spatial_loops()
            if loop in spatial and len(spatial) > 1:
                _fail(f"{what}: the NU lowering deals every spatial tile, not one loop's: fuse the spatial "
                      f"loops first: fuse({', '.join(repr(l) for l in spatial)})")
            if not (loop == "oc.o" and loop in b.loops) and b.fused.get(loop, [loop]) != spatial:
                _fail(f"{what}: the NU lowering deals either the output-channel groups (oc.o) or every "
                      f"spatial tile (the spatial loops fused: {'+'.join(spatial)!r}); loops: {b.loops}")
        elif b.loops != [loop]:
            _fail(f"{what}: the {b.kind} lowering deals all its tiles: fuse every tile loop into one first "
                  f"(loops: {b.loops})")
        tiles = b.loop_extent(loop)
        if tiles < units:
            _fail(f"{what}: {loop!r} has {tiles} tile(s), fewer than {units} {unit}s: some would get no work")
        b.parallel = (loop, units)
        self._record("parallel", (loop, units), block)
        return self

    # ------------------------------------------------------------------ memory primitives

    def _cache(self, kind: str, tensor: str, scope: str, name: str, block: str) -> None:
        b = self.block(block)
        what = f"{kind}({tensor!r}, {scope!r}, {name!r})"
        table = {"nu": NU_CACHES, "pool": POOL_CACHES, "elementwise": ELEMENTWISE_CACHES, "movement": MOVEMENT_CACHES}[b.kind]
        if tensor not in b.tensors():
            _fail(f"{what}: {b.where()} has no tensor {tensor!r} (tensors: {', '.join(b.tensors())})")
        if (kind == "cache_write") != (tensor == "y"):
            _fail(f"{what}: {'only the output y is written' if kind == 'cache_write' else 'y is the output'}: "
                  f"use {'cache_read' if kind == 'cache_write' else 'cache_write'}")
        role = table.get((tensor, scope))
        if role is None:
            scopes = [s for (t, s) in table if t == tensor]
            _fail(f"{what}: the {b.kind} lowering keeps {tensor!r} in {' and '.join(scopes) or 'no local memory'}")
        if not isinstance(name, str) or not name.isidentifier():
            _fail(f"{what}: a cache name is an identifier, got {name!r}")
        if name in b.caches:
            _fail(f"{what}: {b.where()} already has a cache {name!r}")
        if b.role_cache(role) is not None:
            _fail(f"{what}: {tensor!r} is already cached in {scope} as {b.role_cache(role)!r}")
        b.caches[name] = Cache(tensor, scope, role)
        self._record(kind, (tensor, scope, name), block)

    def cache_read(self, tensor: str, scope: str, name: str, *, block: str = "L0") -> "Schedule":
        """Read `tensor` through the local buffer `name` in `scope` (a DMA per tile into it)."""
        self._cache("cache_read", tensor, scope, name, block)
        return self

    def cache_write(self, tensor: str, scope: str, name: str, *, block: str = "L0") -> "Schedule":
        """Write `tensor` through the local buffer `name` in `scope` (a DMA per tile out of it)."""
        self._cache("cache_write", tensor, scope, name, block)
        return self

    def compute_at(self, cache: str, loop: str, *, block: str = "L0") -> "Schedule":
        """Load a cache at `loop`: "root" loads the weights once for the whole kernel (resident)."""
        b = self.block(block)
        what = f"compute_at({cache!r}, {loop!r})"
        c = b.cache_named(cache, what)
        if c.role != "wt" or loop != "root":
            _fail(f"{what}: the lowering loads every cache at the tile loop where it changes; only the "
                  f"weights can move, to 'root' (resident: loaded once)")
        if "ic" in b.factors:
            _fail(f"{what}: resident weights are one chunk, but ic is split by {b.factors['ic']}")
        if cache in b.depths:
            _fail(f"{what}: {cache!r} is double-buffered, which a cache loaded once does not need")
        b.at_root.add(cache)
        self._record("compute_at", (cache, loop), block)
        return self

    def double_buffer(self, cache: str, depth: int = 2, *, block: str = "L0") -> "Schedule":
        """Give a cache `depth` rotating slots, so that the next tile's transfer overlaps this tile's work."""
        b = self.block(block)
        what = f"double_buffer({cache!r}, {depth!r})"
        c = b.cache_named(cache, what)
        if cache in b.at_root:
            _fail(f"{what}: {cache!r} is loaded once (compute_at root): it has one copy")
        if not isinstance(depth, int) or not 2 <= depth <= MAX_DEPTH:
            _fail(f"{what}: depth must be 2..{MAX_DEPTH}")
        least = MIN_DEPTH[b.kind][c.role]
        if depth < least:
            _fail(f"{what}: {cache!r} needs at least {least} slots: {WHY_DEPTH[c.role]}")
        b.depths[cache] = depth
        self._record("double_buffer", (cache, depth) if depth != 2 else (cache,), block)
        return self

    def tensorize(self, stage: str, intrinsic: str, *, block: str = "L0") -> "Schedule":
        """Map a stage of the tile (conv, bias, requant, add, pool ...) onto a unit command."""
        b = self.block(block)
        what = f"tensorize({stage!r}, {intrinsic!r})"
        stages = b.stages()
        if stage not in stages:
            _fail(f"{what}: {b.where()} has no stage {stage!r} (stages: {', '.join(stages)})")
        if stage in b.intrinsics:
            _fail(f"{what}: {stage!r} is already tensorized onto {b.intrinsics[stage]!r}")
        if intrinsic not in stages[stage]:
            why = ""
            if stage == "bias" and intrinsic == "nu.conv":
                why = " (the bias is too large to be made by an NU pass)"
            _fail(f"{what}: {stage!r} goes onto {' or '.join(stages[stage])}{why}")
        if b.kind == "nu" and stage in ("conv",):
            rq = intrinsic in TO_VBUF       # its result goes to VBUF, not ABUF
            for (tensor, scope), role in NU_CACHES.items():
                if role in ("in", "wt", "acc") and not (rq and role == "acc") and b.role_cache(role) is None:
                    _fail(f"{what}: {intrinsic} reads x from ibuf and w from wbuf and accumulates into abuf: "
                          f"cache {tensor!r} in {scope} first")
        b.intrinsics[stage] = intrinsic
        self._record("tensorize", (stage, intrinsic), block)
        return self

    # ------------------------------------------------------------------ layout primitives

    def _layout(self, buffer: str, step: str, block: str, name: str, args: tuple) -> None:
        b = self.block(block)
        what = f"{name}({', '.join(repr(a) for a in (buffer,) + args)})"
        if b.kind != "nu" or buffer != "w":
            _fail(f"{what}: layout steps apply to a conv2d / dense weight 'w' (activations stay NCHW in DDR)")
        if b.ctx["plan"].view.groups != 1:
            _fail(f"{what}: a grouped conv stores its weights block-diagonally, which no layout spec expresses")
        if any(not isinstance(a, int) or isinstance(a, bool) for a in args):
            _fail(f"{what}: the arguments are integers")
        shape = Layout(" ".join(b.layout), b.ctx["plan"].view.weight.shape).stored_shape
        bad = _step_error(step, shape)
        if bad:
            _fail(f"{what}: on the weight as stored so far, {list(shape)}: {bad}")
        b.layout.append(step)
        self._record(name, (buffer,) + args, block)

    def buffer_split(self, buffer: str, axis: int, factor: int, *, block: str = "L0") -> "Schedule":
        """Store `axis` of the buffer as (axis / factor, factor), zero-padded to a multiple of factor."""
        self._layout(buffer, f"split({axis},{factor})", block, "buffer_split", (axis, factor))
        return self

    def buffer_reorder(self, buffer: str, *perm: int, block: str = "L0") -> "Schedule":
        """Store the buffer's axes in the order perm (stored axis k is axis perm[k])."""
        self._layout(buffer, f"reorder({','.join(str(p) for p in perm)})", block, "buffer_reorder", perm)
        return self

    def buffer_pad(self, buffer: str, axis: int, size: int, *, block: str = "L0") -> "Schedule":
        """Store `axis` of the buffer zero-padded up to `size`."""
        self._layout(buffer, f"pad({axis},{size})", block, "buffer_pad", (axis, size))
        return self
