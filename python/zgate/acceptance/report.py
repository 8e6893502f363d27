"""Baseline comparison, the request's criteria and the report (Markdown, English or Chinese).

A run is a dict {"meta": {...}, "cases": [row, ...]} (run.measure's rows), the same as the
--json and --save-baseline files.
"""
import statistics

SPEED_BAR = 0.9


class Mismatch(ValueError):
    pass


def check_compatible(meta, names, base, what):
    """Refuse a baseline made with another seed or case list; the message names the
    difference. meta: this run's seed; names: its case names in order."""
    if base["meta"]["seed"] != meta["seed"]:
        raise Mismatch("%s was made with seed %s, this run uses %s" % (
            what, base["meta"]["seed"], meta["seed"]))
    theirs = [r["case"] for r in base["cases"]]
    if theirs != names:
        only = (("only in %s" % what, [n for n in theirs if n not in names]),
                ("only in this run", [n for n in names if n not in theirs]))
        why = "; ".join("%s: %s%s" % (where, ", ".join(ns[:5]), " ..." if len(ns) > 5 else "")
                        for where, ns in only if ns) or "the same cases in another order"
        raise Mismatch("%s holds another case list (%s): make both with the same --quick, "
                       "--op and --filter" % (what, why))


def _time(r):
    return None if r.get("error") or "kernel" not in r else r["kernel"]["median"]


def compare(run, base):
    """Per case the time ratio (baseline time / this run's) and the bandwidth-normalized
    ratio (fraction of copy here / there); the summary over the cases above the
    launch-bound line (this run's)."""
    rows = {}
    for r, b in zip(run["cases"], base["cases"]):
        t, tb = _time(r), _time(b)
        ok = t is not None and tb is not None
        bw = ok and r.get("frac_copy") and b.get("frac_copy")
        rows[r["case"]] = {"base_us": tb, "ratio": tb / t if ok else None,
                           "bw_ratio": r["frac_copy"] / b["frac_copy"] if bw else None}
    judged = [r["case"] for r in run["cases"] if not r["launch_bound"]]
    ratios = [rows[n]["ratio"] for n in judged]
    have = [x for x in ratios if x is not None]
    s = {"n": len(judged), "n_missing": len(ratios) - len(have),
         "n_launch_bound": len(run["cases"]) - len(judged),
         "interpreter": any(x["meta"].get("interpreter") for x in (run, base))}
    if have:
        bw = [rows[n]["bw_ratio"] for n in judged if rows[n]["bw_ratio"] is not None]
        s.update(geomean=statistics.geometric_mean(have), median=statistics.median(have),
                 min=min(have), n_09=sum(x >= SPEED_BAR for x in have),
                 n_10=sum(x >= 1.0 for x in have),
                 bw_geomean=statistics.geometric_mean(bw) if bw else float("nan"))
    return {"rows": rows, "summary": s}


def criteria(run, cmp, golden, judge_ref=True):
    """[(key, ok, figure)] for the criteria asked for: precision against the float64
    reference (ok None where reported, not judged: upstream's kernel, the competitor),
    against the golden run (if given), speed (if a baseline was given; ok None where either
    run's times are the Triton interpreter's), all ran."""
    cs = run["cases"]
    ran = [r for r in cs if not r.get("error")]
    n = sum(all(m["ok"] for m in r["outputs"]) for r in ran)
    out = [("ref", n == len(ran) if judge_ref else None, "%d/%d" % (n, len(cs)))]
    if golden:
        n = sum(all(m.get("golden_ok") for m in r["outputs"]) for r in ran)
        out.append(("golden", n == len(cs), "%d/%d" % (n, len(cs))))
    if cmp:
        s = cmp["summary"]
        ok = s["n"] >= 2 and not s["n_missing"] and s.get("geomean", 0) >= SPEED_BAR
        fig = "%.3f (n=%d)" % (s["geomean"], s["n"]) if "geomean" in s else "n=%d" % s["n"]
        out.append(("speed", None, fig + ", Triton interpreter") if s.get("interpreter")
                   else ("speed", ok, fig))
    out.append(("ran", len(ran) == len(cs), "%d/%d" % (len(ran), len(cs))))
    return out


T = {
    "en": {
        "title": "zgate acceptance run: %s on %s",
        "env": "Environment", "crit": "The request's criteria", "cases": "Cases",
        "notrun": "Not run", "notes": "How it was measured",
        "ref": "precision against the float64 reference, zgate's policy: float32 within %d "
               "ulp of the elementwise scale (far inside the request's 0.1%% of it), 16-bit "
               "within 1 ulp (their own rounding); the request's 0.1%% per dtype below",
        "nj": {"ref": "**not judged** (upstream's kernel: the speed baseline, not the "
                      "candidate)",
               "speed": "**not judged** (timed under the Triton interpreter, whose times "
                        "mean nothing)"},
        "req": "The request's 0.1%, per output dtype",
        "req_intro": "Error over the elementwise scale (the policy's; below the type's smallest "
                     "normal, that normal) against the float64 reference, over the outputs of "
                     "the cases that ran. float32 outputs are held to 0.1% of it (the policy "
                     "judged above is stricter); 16-bit outputs to their own rounding, 1 ulp "
                     "(rounding alone costs up to 0.39% of a value in bfloat16, 0.05% in "
                     "float16), so the share of their elements past 0.1% of the scale is "
                     "reported, not judged.",
        "req_hdr": "| dtype | outputs | held to | largest error / scale | elements past 0.1% "
                   "of the scale |",
        "req_f32": "0.1%% of the scale: %s", "req_16": "1 ulp (policy, judged above)",
        "golden": "precision against the golden run %s (float32 < 0.1%%, 16-bit within 1 ulp)",
        "speed": "speed: geomean of time ratios >= 0.9 over the cases above the launch-bound "
                 "line (baseline %s)",
        "ran": "every case ran",
        "summary": "Time ratio (baseline / this run) over %d cases above the line: geomean "
                   "%.3f, median %.3f, min %.3f; >= 0.9: %d, >= 1.0: %d; bandwidth-normalized "
                   "geomean %.3f. %d launch-bound cases shown, not judged.",
        "few": "fewer than 2 cases above the launch-bound line: speed not judged",
        "hdr": "| case | MB | precision (error / bound) | past 0.1% | kernel us (min-max) "
               "| wall us | copy us | % of copy | ideal us |",
        "hdr_b": " baseline us | ratio | bw ratio |",
        "hdr_p": "| case | MB | precision (error / bound) | max ulps | past 0.1% |",
        "lb": "launch-bound", "ok": "ok", "fail": "FAIL",
        "note": ["speed: device kernel time (%s), median of %d repeats after %d warm-up "
                 "calls, %d MB written between repeats to flush the cache; wall: event-timed "
                 "wall time of one call; copy: a copy of the same bytes timed the same way",
                 "%% of copy = copy time / kernel time; ideal us = bytes / the device's copy "
                 "bandwidth (%.1f GB/s, read plus written); cases with ideal < 10 us are "
                 "launch-bound",
                 "the timed list is the case list's cases with one dtype (bfloat16, float32) "
                 "in dense and Z-view layouts; --precision-only runs the whole list (mixed "
                 "dtypes, in place, permuted, size 0)",
                 "Triton interpreter: its float32 -> bfloat16 conversion truncates and flushes "
                 "subnormals, so bfloat16 outputs are judged as rounded to nearest and "
                 "subnormal ones not at all"],
    },
    "zh-CN": {
        "title": "zgate 验收测试：%s，设备 %s",
        "env": "环境", "crit": "需求的验收标准", "cases": "用例",
        "notrun": "未运行", "notes": "测量方法",
        "ref": "精度（对比 float64 参考，zgate 的误差界）：float32 误差在逐元素尺度的 %d ulp "
               "内（远小于需求的 0.1%%），16 位类型在 1 ulp 内（其自身舍入）；需求的 0.1%% "
               "按数据类型见下文",
        "nj": {"ref": "**不判定**（上游内核：性能基线，而非被验收的实现）",
               "speed": "**不判定**（在 Triton 解释器下计时，其耗时没有意义）"},
        "req": "需求的 0.1%：按输出数据类型",
        "req_intro": "相对 float64 参考的误差除以逐元素尺度（误差界所用的尺度；低于该类型最小"
                     "正规数处取该正规数），统计已运行用例的全部输出。float32 输出须在尺度的 "
                     "0.1% 以内（上文判定的误差界更严）；16 位输出以其自身舍入为准，即 1 ulp"
                     "（仅舍入一项，bfloat16 最多即为数值的 0.39%，float16 为 0.05%），因此其超出"
                     "尺度 0.1% 的元素比例只列出，不判定。",
        "req_hdr": "| 数据类型 | 输出数 | 标准 | 最大误差 / 尺度 | 超出尺度 0.1% 的元素比例 |",
        "req_f32": "尺度的 0.1%%：%s", "req_16": "1 ulp（误差界，见上文判定）",
        "golden": "精度（对比标杆结果 %s）：float32 < 0.1%%，16 位类型相差不超过 1 ulp",
        "speed": "性能：在非启动受限的用例上，耗时比的几何平均 >= 0.9（基线 %s）",
        "ran": "所有用例均已运行",
        "summary": "耗时比（基线 / 本次）共 %d 个用例（在启动受限线以上）：几何平均 %.3f，"
                   "中位数 %.3f，最小值 %.3f；>= 0.9：%d 个，>= 1.0：%d 个；按带宽归一化的"
                   "几何平均 %.3f。另有 %d 个启动受限用例仅列出，不参与判定。",
        "few": "启动受限线以上的用例少于 2 个：不判定性能",
        "hdr": "| 用例 | MB | 精度（误差 / 误差界） | 超出 0.1% | 内核耗时 us（最小-最大） "
               "| 墙钟 us | 拷贝 us | 拷贝带宽占比 | 理想 us |",
        "hdr_b": " 基线 us | 耗时比 | 带宽归一化比 |",
        "hdr_p": "| 用例 | MB | 精度（误差 / 误差界） | 最大 ulp | 超出 0.1% |",
        "lb": "启动受限", "ok": "通过", "fail": "不通过",
        "note": ["性能：设备内核耗时（%s），%d 次重复的中位数，预热 %d 次，每次重复前写入 %d MB "
                 "以清空缓存；墙钟：事件计时的单次调用耗时；拷贝：相同字节数的拷贝，以相同方式计时",
                 "拷贝带宽占比 = 拷贝耗时 / 内核耗时；理想 us = 字节数 / 设备拷贝带宽（%.1f GB/s，"
                 "读写合计）；理想耗时 < 10 us 的用例为启动受限",
                 "计时的用例取自用例表中只有一种数据类型（bfloat16、float32）、稠密和 Z 视图布局的"
                 "部分；--precision-only 运行整个用例表（混合类型、原地、转置、大小为 0）",
                 "Triton 解释器：其 float32 -> bfloat16 转换为截断并将次正规数清零，因此 bfloat16 "
                 "输出按就近舍入后的值判定，次正规数不判定"],
    },
}


def _f(x, fmt="%.1f"):
    return "-" if x is None else fmt % x


def _precision(r, t):
    """ok/FAIL, the largest error as a fraction of zgate's bound and, with a golden run, the
    largest distance to it as a fraction of that comparison's bound."""
    if "precision_ok" not in r:
        return "-"
    g = [m["golden_worst"] for m in r["outputs"] if "golden_worst" in m]
    return "%s %.2g%s" % (t["ok"] if r["precision_ok"] else t["fail"],
                          max(m["max_bound_ratio"] for m in r["outputs"]),
                          " / %.2g" % max(g) if g else "")


def _past(r):
    """Per output, the share of its elements past 0.1% of the scale ("dz / dout_scaled")."""
    return " / ".join("%.3g%%" % (100 * m["request_share"]) for m in r["outputs"]
                      if "request_share" in m) or "-"


def request_by_dtype(run):
    """{dtype: {"outputs", "max", "past", "n", "share"}}: the request's 0.1% figures over
    the outputs of the cases that ran (zgate_check_tensor's, per output)."""
    out = {}
    for r in run["cases"]:
        for m in r["outputs"] if not r.get("error") else ():
            if "request_past" not in m:
                continue
            d = out.setdefault(m["dtype"], {"outputs": 0, "max": 0.0, "past": 0, "n": 0})
            d["outputs"] += 1
            d["max"] = max(d["max"], m["request_max"])
            d["past"] += m["request_past"]
            d["n"] += m["n"]
    for d in out.values():
        d["share"] = d["past"] / d["n"] if d["n"] else 0.0
    return out


def markdown(run, cmp, crits, lang="en"):
    t, m = T[lang], run["meta"]
    ok = lambda b: "**PASS**" if b else "**FAIL**"     # noqa: E731
    L = ["# " + t["title"] % (m["impl"], m["device_name"]), "", "## " + t["env"], ""]
    L += ["- %s: %s" % kv for kv in sorted(m["versions"].items())]
    L += ["- seed %s, %s%s, %d cases" % (m["seed"], "--quick" if m["quick"] else "full list",
                                          ", --precision-only" if m.get("precision_only")
                                          else "", len(run["cases"])), "", "## " + t["crit"], ""]
    for key, good, fig in crits:
        arg = {"ref": m["f32_ulps"], "golden": m.get("golden"),
               "speed": m.get("baseline")}.get(key)
        L.append("- %s %s: %s" % (t["nj"][key] if good is None else ok(good),
                                  t[key] % arg if arg else t[key], fig))
    req = request_by_dtype(run)
    if req:
        L += ["", "## " + t["req"], "", t["req_intro"], "", t["req_hdr"], "|---" * 5 + "|"]
        for dt, d in sorted(req.items()):
            held = t["req_f32"] % ok(d["past"] == 0) if dt == "float32" else t["req_16"]
            L.append("| %s | %d | %s | %.3g | %.3g%% |" % (dt, d["outputs"], held, d["max"],
                                                         100 * d["share"]))
    if cmp:
        s = cmp["summary"]
        L += ["", t["summary"] % (s["n"], s["geomean"], s["median"], s["min"], s["n_09"],
                                  s["n_10"], s["bw_geomean"], s["n_launch_bound"])
              if "geomean" in s and s["n"] >= 2 else t["few"]]
    timed = not m.get("precision_only")
    hdr = (t["hdr"] + (t["hdr_b"] if cmp else "")) if timed else t["hdr_p"]
    L += ["", "## " + t["cases"], "", hdr, "|---" * (hdr.count("|") - 1) + "|"]
    for r in run["cases"]:
        if not timed:
            ulps = [x["ulps"] for x in r["outputs"]]
            L.append("| %s | %.2f | %s | %s | %s |" % (r["case"], r["bytes"] / 1e6, _precision(
                r, t), _f(max(ulps) if ulps else None, "%.2f"), _past(r)))
            continue
        k = r.get("kernel") or {}
        name = r["case"] + (" (%s)" % t["lb"] if r["launch_bound"] else "")
        line = "| %s | %.2f | %s | %s | %s (%s-%s) | %s | %s | %s | %.1f |" % (
            name, r["bytes"] / 1e6, _precision(r, t), _past(r), _f(k.get("median")),
            _f(k.get("min")),
            _f(k.get("max")), _f((r.get("wall") or {}).get("median")),
            _f((r.get("copy") or {}).get("median")),
            _f(r.get("frac_copy") and 100 * r["frac_copy"], "%.1f%%"), r["ideal_us"])
        if cmp:
            c = cmp["rows"][r["case"]]
            line += " %s | %s | %s |" % (_f(c["base_us"]), _f(c["ratio"], "%.3f"),
                                         _f(c["bw_ratio"], "%.3f"))
        L.append(line)
    bad = [r for r in run["cases"] if r.get("error")]
    nocopy = [r for r in run["cases"] if r.get("copy_error")]
    if bad or nocopy or m.get("not_run"):
        L += ["", "## " + t["notrun"], ""]
        L += ["- %s: %s" % (r["case"], r["error"].replace("\n", " ")[:300]) for r in bad]
        L += ["- %s, copy: %s" % (r["case"], r["copy_error"][:300]) for r in nocopy]
        L += ["- " + x for x in m.get("not_run", [])]
    n = t["note"]
    L += ["", "## " + t["notes"], ""]
    if timed:
        L += ["- " + n[0] % (m["timer"], m["repeats"], m["warmup"], m["flush_mb"]),
              "- " + n[1] % m["copy_gbps"]]
    L += ["- " + n[2]] + (["- " + n[3]] if m.get("interpreter") else [])
    return "\n".join(L) + "\n"
