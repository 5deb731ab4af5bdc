"""nnpc: compile one quantised op from the command line into NNP-1 assembly; the verbs compile, run, sweep."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from isa_spec.cli_args import CliFileError, OneLineParser, check_output, read_npy, write_with
from nnpsim.config import ConfigError

from . import ops
from .build import build
from .cli_network import HELP, config_of
from .cli_network import main as network_main
from .errors import CompileError
from .quant import quantize_multipliers
from .sweep.cli import main as sweep_main
from .sweep.cli import parser as sweep_parser

OPS = ("conv2d", "dense", "max_pool2d", "avg_pool2d", "sum_pool2d", "global_avg_pool2d", "add", "mul", "relu",
       "clip", "requantize")

EXAMPLE = """\
whole networks (see `nnpc compile --help`, `nnpc run --help`):
  nnpc compile model.onnx -o model.nnp
  nnpc run model.onnx --input x.npy --compare-onnxruntime
design-space sweeps (see `nnpc sweep --help`, docs/sweep.md):
  nnpc sweep sweep.toml -o results.csv --plot pareto.png

example:
  nnpc conv2d --x-shape 1,16,32,32 --weight w.npy --bias b.npy --stride 2 --padding 1 \\
       --x-zp -3 --scale 0.0021 --zp-out 5 --relu -o conv.s
  nnpasm conv.s -o conv.bin
  nnpsim run conv.bin --input x=x.npy --output y=y.npy --check-races

Weights and biases are .npy files (int8 [O, C/groups, KH, KW] for conv2d,
int8 [K, O] for dense, int32 [O] biases).  Give requantisation either as
--multiplier/--shift (an int, or a .npy with one per output channel) or as
--scale (a float, or a .npy of floats), converted as docs/compiler.md says.
The .s file takes large weights from .incbin files written beside it; its
input buffer is x (add and mul: a and b), its output y.  It records the
machine it was built for (--config) with .target lines; nnpsim refuses to
run it on a machine with other unit counts, array or buffer sizes.
"""


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _load(path: str, what: str) -> np.ndarray:
    try:
        return read_npy(path, what)
    except CliFileError as exc:
        raise CompileError(str(exc)) from None


def _int_or_file(text: str | None, what: str):
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return _load(text, what)


def _one(v: tuple[int, ...]):
    return v[0] if len(v) == 1 else v


def _requant(args) -> dict:
    if args.scale is not None:
        if args.multiplier is not None or args.shift is not None:
            raise CompileError("give either --scale or --multiplier and --shift, not both")
        try:
            scales = [float(args.scale)]
        except ValueError:
            scales = _load(args.scale, "--scale")
        m, s = quantize_multipliers(scales)
        return {"multiplier": m if m.size > 1 else int(m[0]), "shift": s if s.size > 1 else int(s[0])}
    if args.multiplier is None or args.shift is None:
        raise CompileError("requantisation needs --scale, or both --multiplier and --shift")
    return {"multiplier": _int_or_file(args.multiplier, "--multiplier"),
            "shift": _int_or_file(args.shift, "--shift")}


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="nnpc OP", description="compile one quantised op into NNP-1 assembly", epilog=EXAMPLE,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("op", choices=OPS)
    p.add_argument("--x-shape", type=_ints, required=True, help="input shape, e.g. 1,16,32,32")
    p.add_argument("--weight", help="weights (.npy)")
    p.add_argument("--bias", help="int32 bias (.npy)")
    p.add_argument("--stride", type=_ints, default=None, help="int or h,w")
    p.add_argument("--padding", type=_ints, default=(0,), help="int, h,w or top,left,bottom,right")
    p.add_argument("--dilation", type=_ints, default=(1,))
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--kernel", type=_ints, help="pooling window, int or h,w")
    p.add_argument("--no-count-include-pad", action="store_true", help="avg_pool2d: count only real elements")
    p.add_argument("--x-zp", type=int, default=0, help="input zero point (zx for requantize, za for add/mul)")
    p.add_argument("--zb", type=int, default=0, help="zero point of b (add, mul)")
    p.add_argument("--scale", help="float scale or .npy of per-channel scales")
    p.add_argument("--multiplier", help="M: int or .npy (add: ma)")
    p.add_argument("--mb", type=int, help="add: multiplier of b")
    p.add_argument("--shift", help="S: int or .npy")
    p.add_argument("--in-dtype", default="int32", choices=["int8", "int32"], help="requantize input dtype")
    p.add_argument("--zp-out", type=int, default=0)
    p.add_argument("--lo", type=int, default=-128)
    p.add_argument("--hi", type=int, default=127)
    p.add_argument("--relu", action="store_true", help="fuse a ReLU at zp-out (conv2d, dense)")
    p.add_argument("--config", help="machine configuration (TOML, as `nnpsim config` prints); default: the built-in reference machine")
    p.add_argument("-o", "--output", required=True, help="assembly file to write")
    p.add_argument("--binary", help="also write the assembled binary here")
    return p


def make_ops(args) -> list[ops.Op]:
    """The op (and a fused ReLU) the arguments describe."""
    clamp = {"zp_out": args.zp_out, "lo": args.lo, "hi": args.hi}
    shape = args.x_shape
    if args.op in ("conv2d", "dense"):
        if args.weight is None:
            raise CompileError(f"{args.op} needs --weight")
        w = _load(args.weight, "--weight")
        bias = None if args.bias is None else _load(args.bias, "--bias")
        if args.op == "conv2d":
            op = ops.conv2d(shape, w, bias, stride=_one(args.stride or (1,)), padding=_one(args.padding),
                            dilation=_one(args.dilation), groups=args.groups, x_zp=args.x_zp,
                            **_requant(args), **clamp)
        else:
            op = ops.dense(shape, w, bias, x_zp=args.x_zp, **_requant(args), **clamp)
        return [op] + ([ops.relu(op.output.shape, args.zp_out)] if args.relu else [])
    if args.op == "global_avg_pool2d":
        return [ops.global_avg_pool2d(shape)]
    if args.op.endswith("pool2d"):
        if args.kernel is None:
            raise CompileError(f"{args.op} needs --kernel")
        stride = None if args.stride is None else _one(args.stride)
        if args.op == "avg_pool2d":
            return [ops.avg_pool2d(shape, _one(args.kernel), stride, _one(args.padding),
                                   not args.no_count_include_pad, args.x_zp)]
        return [getattr(ops, args.op)(shape, _one(args.kernel), stride, _one(args.padding))]
    if args.op == "relu":
        return [ops.relu(shape, args.zp_out)]
    if args.op == "clip":
        return [ops.clip(shape, args.lo, args.hi)]
    q = _requant(args)
    if args.op == "add":
        if args.mb is None:
            raise CompileError("add needs --multiplier (ma), --mb and --shift")
        return [ops.add(shape, za=args.x_zp, zb=args.zb, ma=q["multiplier"], mb=args.mb, shift=q["shift"], **clamp)]
    if args.op == "mul":
        return [ops.mul(shape, za=args.x_zp, zb=args.zb, **q, **clamp)]
    return [ops.requantize(shape, in_dtype=args.in_dtype, zx=args.x_zp, **q, **clamp)]


def usage() -> str:
    """`nnpc --help`: the verbs, a line each, and the single-op form."""
    verbs = {**HELP, "sweep": sweep_parser().description, "OP": f"compile one op ({', '.join(OPS)})"}
    width = max(map(len, verbs))
    lines = ["usage: nnpc {compile,run,sweep} ...  |  nnpc OP --x-shape SHAPE ... -o FILE.s", "",
             "NNP-1 compiler: whole ONNX networks, design-space sweeps, single ops.", "", "commands:"]
    lines += [f"  {verb:<{width}}  {text}" for verb, text in verbs.items()]
    lines += ["", "`nnpc COMMAND --help` (or `nnpc conv2d --help`) shows each command's options.",
              "exit status: 0 success, 1 a file, model, option value or output path that cannot be used, "
              "2 a bad command line, 3 a simulation failed (nnpc run).",
              "Output paths are written exactly as given, or refused before any work starts."]
    return "\n".join(lines) + "\n"


def _single_op(args) -> int:
    """nnpc OP: build the op, write the assembly (and the .incbin files beside it) and --binary."""
    check_output(args.output, "-o")
    if args.binary:
        check_output(args.binary, "--binary")
    kernel = build(*make_ops(args), config=config_of(args.config))
    for name in kernel.files:        # the .incbin files save_asm writes beside the assembly
        check_output(Path(args.output).with_name(name), "-o (an .incbin file beside it)")
    write_with(args.output, "-o", kernel.save_asm)
    if args.binary:
        write_with(args.binary, "--binary", kernel.save)
    print(f"nnpc: wrote {args.output} ({kernel.predicted_cycles} cycles predicted; "
          f"inputs {', '.join(kernel.input_names)}, output y)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the nnpc console script; returns the exit status (--help and refused command lines too)."""
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as exc:       # argparse: --help (0), or a command line OneLineParser refused (2)
        return exc.code if isinstance(exc.code, int) else 2


def _main(argv: list[str]) -> int:
    if argv and argv[0] in ("compile", "run"):
        return network_main(argv)
    if argv and argv[0] == "sweep":
        return sweep_main(argv[1:])
    if not argv:
        print("nnpc: error: give a command (compile, run, sweep) or an op (see nnpc --help)", file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0
    args = _parser().parse_args(argv)
    try:
        return _single_op(args)
    except (CompileError, ConfigError, CliFileError, OSError) as exc:
        print(f"nnpc: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
