"""benchmarks/zoo_results.py: variant parsing, the agreement judge, the roofline and its weight-streaming
rule, the table rows and goals, the rows file; on hand-made results, without torch or a compiled network."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import zoo_results as zr  # noqa: E402

PEAK, BW = 1024, 32


def test_variants_parse_in_order_without_repeats_and_refuse_unknown_names_in_one_line():
    assert zr.parse_variants("qdq-uint8-pt, qoperator-int8-pc,qdq-uint8-pt") == ["qdq-uint8-pt", "qoperator-int8-pc"]
    assert zr.split_variant("qdq-uint8-pt") == ("qdq", "uint8", "pt")
    assert len(zr.ALL_VARIANTS) == 8 and set(zr.VARIANTS) <= set(zr.ALL_VARIANTS)
    for bad in ("qdq-int4-pc", "qoperator-int8", ""):
        with pytest.raises(zr.UsageError) as e:
            zr.parse_variants(bad)
        assert "\n" not in str(e.value) and "--variants" in str(e.value)
    with pytest.raises(zr.UsageError, match="'vgg12'"):
        zr.parse_names("vgg11,vgg12", ["vgg11"], "--models")


def test_qoperator_is_judged_bit_exact_and_counts_the_elements_that_differ():
    a = np.arange(12, dtype=np.float32).reshape(1, 12)
    assert zr.judge("classifier", "qoperator", [a], [a.copy()], [a + 5]) == (True, "bit-exact")
    b = a.copy()
    b[0, 3] += 0.5
    assert zr.judge("classifier", "qoperator", [b], [a], [a]) == (False, "1/12 differ")
    assert zr.judge("classifier", "qoperator", [a], [a, a], [a, a])[0] is False
    assert zr.judge("classifier", "qoperator", [a.reshape(3, 4)], [a], [a]) == (False, "shape (3, 4), onnxruntime (1, 12)")


def test_qdq_must_keep_the_arg_max_and_stay_between_onnxruntimes_two_levels():
    d = np.array([[0.0, 1.0, 3.0, 2.0]])
    p = np.array([[0.5, 1.0, 2.5, 2.0]])
    ok, text = zr.judge("classifier", "qdq", [np.array([[0.25, 1.0, 2.75, 2.0]])], [d], [p])
    assert ok and text == "arg max same, 0 outside ORT's levels (max distance 0.25, ORT's levels 0.5)"
    ok, text = zr.judge("classifier", "qdq", [np.array([[0.25, 1.0, 3.5, 2.0]])], [d], [p])
    assert not ok and "1 outside" in text
    ok, text = zr.judge("classifier", "qdq", [np.array([[0.5, 1.0, 2.5, 2.5]])], [d], [np.array([[0.5, 1, 2.5, 2.5]])])
    assert ok                           # both ends of the range allowed: argmax 2 in each
    d2 = np.zeros((1, 3, 2, 2))
    d2[0, 1] = 1
    o2 = d2.copy()
    o2[0, 2, 1, 1] = 2                  # one position's class changes: a segmenter is judged per position
    ok, text = zr.judge("segmenter", "qdq", [o2], [d2], [o2])
    assert not ok and "DIFFERS" in text
    scores = np.zeros((1, 5, 3))        # a detector's [image, anchor, class] scores: judged over the last axis
    scores[0, :, 1] = 1
    other = scores.copy()
    other[0, 4] = [0, 0, 2]
    last = zr.Classes(axis=-1)
    assert zr.judge("detector", "qdq", [other], [scores], [other], last)[1].startswith("arg max DIFFERS")
    louder = scores.copy()
    louder[0, 4, 1] = 2                 # the same class per anchor, another anchor loudest per class
    assert zr.judge("detector", "qdq", [louder], [scores], [louder], last)[0]
    assert not zr.judge("detector", "qdq", [louder], [scores], [louder], zr.Classes(axis=1))[0]


def test_a_detectors_arg_max_runs_over_its_class_scores_alone():
    head = np.zeros((1, 4 + 3, 6))      # a YOLO head: [image, 4 box rows + 3 classes, anchor]
    head[0, 5] = 1.0
    head[0, :4] = 9.0                   # the box rows are larger than any score
    moved = head.copy()
    moved[0, 1, 2] = 12.0               # one box coordinate moves, within ORT's two levels: no class changes
    rows = zr.Classes(axis=1, first=4)
    assert zr.judge("detector", "qdq", [moved], [head], [moved], rows)[0]
    assert not zr.judge("detector", "qdq", [moved], [head], [moved], zr.Classes(axis=1))[0]
    changed = head.copy()
    changed[0, 6, 3] = 2.0              # a class score changes an anchor's class
    assert "DIFFERS" in zr.judge("detector", "qdq", [changed], [head], [changed], rows)[1]
    boxes, scores = np.zeros((1, 5, 4)), np.zeros((1, 5, 3))
    other_boxes = boxes.copy()
    other_boxes[0, 1, 2] = 1.0          # an SSD's boxes output holds no scores: only its range is judged
    ssd = zr.Classes(axis=-1, outputs=(1,))
    assert zr.judge("detector", "qdq", [other_boxes, scores], [boxes, scores], [other_boxes, scores], ssd)[0]
    assert not zr.judge("detector", "qdq", [other_boxes, scores], [boxes, scores], [boxes, scores], ssd)[0]


def test_the_roofline_of_a_compute_bound_network_is_its_macs_over_the_peak():
    ks = [zr.Kernel(10_240_000, 64_000, 10_000), zr.Kernel(2_048_000, 8_000, 2_500)]
    r = zr.roofline(ks, io_bytes=32_000, peak_macs=PEAK, ddr_bytes_per_cycle=BW)
    assert (r.network, r.kernels, r.streaming, r.cycles) == (12_000, 12_500, False, 12_000)


def test_the_roofline_counts_inputs_outputs_and_constants_once_when_ddr_bound():
    ks = [zr.Kernel(1024, 100, 5), zr.Kernel(1024, 0, 7)]
    r = zr.roofline(ks, io_bytes=3 * 32 + 1, peak_macs=PEAK, ddr_bytes_per_cycle=BW)
    assert r.network == -(-(97 + 100) // 32) == 7
    assert r.kernels == 12


def test_a_network_whose_constants_sit_mostly_in_weight_bound_kernels_is_weight_streaming():
    conv = zr.Kernel(7_000_000_000, 9_000_000, 6_900_000)         # each weight used ~780 times
    fc = zr.Kernel(102_000_000, 102_000_000, 3_200_000)          # each weight used once
    vgg = [conv, fc]
    assert zr.weight_streaming(vgg, PEAK, BW)
    r = zr.roofline(vgg, 0, PEAK, BW)
    assert r.streaming and r.cycles == r.kernels == 10_100_000 > r.network
    resnet = [zr.Kernel(4_000_000_000, 23_000_000, 3_900_000), zr.Kernel(2_000_000, 2_000_000, 62_500)]
    assert not zr.weight_streaming(resnet, PEAK, BW)
    assert not zr.weight_streaming([zr.Kernel(100, 0, 1)], PEAK, BW)        # no constants at all
    # exactly at the balance point (bytes / 32 == MACs / 1024) a kernel is not weight-bound
    assert not zr.weight_streaming([zr.Kernel(1024, 32, 1)], PEAK, BW)
    assert zr.weight_streaming([zr.Kernel(1023, 32, 1)], PEAK, BW)


def _result(name="resnet18", **kw) -> zr.Result:
    base = dict(imported="ok", library="torchvision", commit="abc1234", npu_share=1.0, agreement="bit-exact",
                ok=True, cycles=1100, bound_sum=1250, network_bound=1000, mac_bound=900, compile_s=4.25,
                second_s=0.2, checked_ratio=1.5, ort_ratio=1.8)
    base.update(kw)
    return zr.Result(name, kw.pop("variant", zr.PERFORMANCE_VARIANT), **{k: v for k, v in base.items()
                                                                      if k != "variant"})


def test_rows_of_a_result_and_of_a_refusal():
    r = _result()
    assert r.roofline_ratio == 1100 / 1000
    assert zr.row(r) == ["resnet18", "torchvision", "qoperator-int8-pc", "ok", "100.0%", "bit-exact", "0.88", "1.22",
                         "4.2"]
    assert zr.performance_row(r) == ["resnet18", "1,100", "1,000 (network)", "1.10", "4.25", "0.20", "1.50",
                                     "1.80 (goal 2)"]
    s = _result("vgg11", streaming=True, cycles=2000, compile_s=12.0, ort_ratio=2.5)
    assert zr.performance_row(s)[2:5] == ["1,250 (Σ kernels)", "1.60 (over)", "12.00 (over)"]
    assert zr.performance_row(s)[7] == "2.50 (over) (goal 2)"
    refused = zr.Result("ssdlite320", "qdq-int8-pc", "op type 'X' has no NPU lowering")
    assert refused.roofline_ratio is None
    assert zr.row(refused)[3:] == ["refused: op type 'X' has no NPU lowering", "-", "-", "-", "-", "-"]
    assert zr.performance_row(refused)[2:] == ["-"] * 6


def test_resnet50_and_mobilenet_v2_have_the_tighter_onnxruntime_goal():
    assert zr.ort_goal("resnet50") == zr.ort_goal("mobilenet_v2") == 1.5 and zr.ort_goal("vgg11") == 2
    assert zr.missed([_result("resnet50", ort_ratio=1.6)]) == ["resnet50: unchecked / onnxruntime 1.60, goal 1.5"]
    assert zr.missed([_result("alexnet", ort_ratio=1.6)]) == []


def test_the_summary_takes_geometric_means_and_the_goals_name_every_miss():
    rs = [_result("a", cycles=1000), _result("b", cycles=1440), zr.Result("c", zr.PERFORMANCE_VARIANT, "refused")]
    summary = zr.performance_summary(rs)
    assert summary[0] == "geometric mean, 2 of 3 networks"
    assert summary[3] == "1.20 (goal 1.2)"                     # sqrt(1.0 * 1.44)
    assert zr.missed(rs) == ["c qoperator-int8-pc: refused"]
    worse = rs[:2] + [_result("d", cycles=1490, second_s=1.5)]
    assert zr.missed(worse) == ["d: second compile CPU s 1.50, goal 1",
                                f"geometric mean of cycles / roofline {zr.geometric_mean([1.0, 1.44, 1.49]):.2f}, goal 1.2"]
    assert zr.geometric_mean([]) is None


def test_the_rows_file_round_trips_replaces_a_pair_and_orders_as_asked(tmp_path):
    path = tmp_path / "rows.json"
    assert zr.load_rows(path) == []
    rs = zr.merged([_result("a"), _result("b")], _result("a", cycles=7))
    zr.save_rows(path, rs)
    assert [p.name for p in tmp_path.iterdir()] == ["rows.json"]         # no temporary file left
    back = zr.load_rows(path)
    assert back == rs and [r.name for r in back] == ["b", "a"] and back[1].cycles == 7
    got, missing = zr.in_order(back, ["a", "b", "c"], [zr.PERFORMANCE_VARIANT, "qdq-int8-pc"])
    assert [r.name for r in got] == ["a", "b"]
    assert missing == ["a qdq-int8-pc", "b qdq-int8-pc", "c qoperator-int8-pc", "c qdq-int8-pc"]
    assert zr.commits(back + [_result("c", commit="def5678")]) == "abc1234, def5678"


def test_a_file_that_is_not_a_rows_file_is_refused_in_one_line(tmp_path):
    for text in ("{not json", json.dumps({"a": 1}), json.dumps([{"name": "a"}])):
        path = tmp_path / "rows.json"
        path.write_text(text)
        with pytest.raises(zr.UsageError) as e:
            zr.load_rows(path)
        assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_macs_of_convolutions_and_of_linear_layers_as_torch_exports_them():
    assert zr.node_macs("Conv", [1, 16, 8, 8], [32, 16, 3, 3], [1, 32, 8, 8]) == 32 * 64 * 16 * 9
    assert zr.node_macs("Conv", [1, 16, 8, 8], [16, 1, 3, 3], [1, 16, 8, 8]) == 16 * 64 * 9       # depthwise
    assert zr.node_macs("ConvTranspose", [1, 8, 4, 4], [8, 4, 2, 2], [1, 4, 8, 8]) == 8 * 16 * 4 * 4
    # torch's Linear(1280, 1000): Gemm with B [1000, 1280] and transB=1; K is 1280, not 1000
    assert zr.node_macs("Gemm", [1, 1280], [1000, 1280], [1, 1000], trans_b=True) == 1000 * 1280
    assert zr.node_macs("Gemm", [1, 1280], [1280, 1000], [1, 1000]) == 1000 * 1280
    assert zr.node_macs("MatMul", [1, 197, 192], [192, 576], [1, 197, 576]) == 197 * 576 * 192
    with pytest.raises(ValueError, match="'Relu'"):
        zr.node_macs("Relu", [1], [1], [1])


def test_the_missing_pairs_are_said_by_variant():
    missing = ["a qdq-int8-pc", "b qdq-int8-pc", "b qdq-uint8-pt"]
    assert zr.missing_text(missing, ["a", "b"]) == "qdq-int8-pc: every network; qdq-uint8-pt: b"
