"""What the report's figures draw, read back from the rendered matplotlib objects (Agg):
a panel per defense on its own strengths and per dataset (never a mean over either), no
figure for a field that only follows the dataset, legends without ``nan``, titles inside
the figure, error bars only where a cell has 3 seeds, the no-information line on AP-MP
panels, colours that tell defenses apart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from analysis import axis_plots, plots
from analysis.axes import flatten
from analysis.by_axis import per_training
from analysis.plot_jobs import ap_mp_points, axis_jobs, panel_metrics
from analysis.report import prepare
from analysis.synthetic import frame, row, training

if TYPE_CHECKING:
    from sweep_engine.plan import Plan

matplotlib.use("Agg")

STRENGTHS = {"gdp": (0.001, 0.01, 0.1, 1.0), "gs": (95.0, 99.0), "mid": (0.01, 0.1, 1.0)}


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure saved, kept for inspection (nothing is written: no rasterizing)."""
    figures: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: figures.append(fig))
    return figures


ISSUE_42 = """name: issue42
base: {n_parties: 2, partition: agg}
grid:
  dataset: [adult, digits]
  protocol: [fedsgd, {protocol: fedbcd, protocol_params: {q: 5}}]
  seed: [0, 1, 2]
defenses: {mid: [0.01, 1.0, 100.0]}
attacks: [ns, ds, pmc]
"""
MID = (None, 0.01, 1.0, 100.0)
CHANCE = {"adult": 0.76, "digits": 0.1}  # majority share, 1 / classes


def issue_42(folder: Path) -> tuple[Plan, list[dict]]:
    """Issue 42's sweep as planned (adult and digits, FedSGD and FedBCD q=5, MID 0.01/1/100
    and none, NS/DS/PMC, 3 seeds; NS and DS dropped on 10-class digits) and the records
    its trainings would write: the engine's spec_json, so ``epochs``, ``batch_size`` and
    ``model`` vary with the dataset as they do there. MP and advantage fall with MID's λ;
    PMC is at chance on adult even undefended, not on digits."""
    from sweep_engine.plan import expand
    from sweep_engine.space import load_space

    space = folder / "issue42.yaml"
    space.write_text(ISSUE_42)
    # planned as a dry run plans it: the records are made up, adult's files are not needed
    plan = expand(load_space(str(space)), missing_ok=True)
    rows = []
    for t in plan.trainings:
        spec = t.spec
        k, jitter = MID.index(spec.defense_param), spec.seed / 500
        fields = {
            "trial_id": t.trial_id,
            "dataset": spec.dataset,
            "protocol": spec.protocol,
            "protocol_params": json.dumps(spec.protocol_params, sort_keys=True),
            "model": spec.model,
            "defense": spec.defense,
            "defense_param": spec.defense_param,
            "seed": spec.seed,
            "spec_json": json.dumps(spec.model_dump(mode="json"), sort_keys=True),
            "mp_se": 0.004,
        }
        mp = {"adult": 0.85, "digits": 0.95}[spec.dataset] - 0.02 * k + jitter
        mp -= 0.01 * (spec.protocol == "fedbcd")
        rows.append(row(mp=mp, **fields))
        chance = CHANCE[spec.dataset]
        for name, _ in t.attacks:
            top = 0.0 if (name, spec.dataset) == ("pmc", "adult") else 0.6
            adv = max(top - 0.15 * k, 0.0) + (jitter if top else 0.0)
            ap = chance + adv * (1 - chance)
            rows.append(
                row(mp=mp, attack=name, attack_type="LI", ap=ap, ap_chance=chance,
                    ap_advantage=adv, ap_advantage_se=0.01, ap_collapse=0.2, **fields)
            )  # fmt: skip
    return plan, rows


def title(fig: Figure) -> str:
    """The figure's title as one line (it is wrapped to the figure's width)."""
    return " ".join(fig._suptitle.get_text().split())


def defense_rows(seeds: int = 1, partitions: tuple[str, ...] = ("agg",)) -> list[dict]:
    rows = []
    for seed in range(seeds):
        for partition in partitions:
            common = {"seed": seed, "partition": partition}
            rows += training(0.9, {"dli": ("LI", 0.8, None)}, **common)
            for name, strengths in STRENGTHS.items():
                for i, strength in enumerate(strengths):
                    mp, ap = 0.85 - 0.05 * i + seed / 100, 0.6 - 0.1 * i
                    attacks = {"dli": ("LI", ap, None)}
                    rows += training(mp, attacks, defense=name, defense_param=strength, **common)
    return rows


def long_table(rows: list[dict]) -> tuple[pd.DataFrame, list[str]]:
    flat, axes = flatten(frame(rows))
    cell_axes = [a for a in axes if a != "seed"]
    return per_training(flat, cell_axes), cell_axes


def draw_axes(rows: list[dict], folder: Path) -> list[str]:
    """Every ``axis_<axis>`` figure of ``rows``; returns the file names."""
    long, cell_axes = long_table(rows)
    jobs = axis_jobs(long, cell_axes, folder)
    names = []
    for args in jobs:
        axis_plots.plot_axis(*args)
        names.append(args[-1].name)
    return names


def test_defense_figure_has_a_panel_per_defense_on_its_own_strengths(
    drawn: list[Figure], tmp_path: Path
) -> None:
    names = draw_axes(defense_rows(partitions=("agg", "split")), tmp_path)
    assert names == ["axis_defense.png", "axis_partition.png"]  # no pooled defense_param
    by_strength, by_partition = drawn
    panels = [ax for ax in by_strength.axes if ax.get_visible()]
    assert len(panels) == 2 * 3  # (mp, ap:dli) x (gdp, gs, mid)
    assert [ax.get_title() for ax in panels[:3]] == ["gdp", "gs", "mid"]
    for ax in panels:
        name = ax.get_title()
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("no defense")]
        xs = {float(x) for ln in lines for x in ln.get_xdata()}
        assert xs == set(STRENGTHS[name]), name  # its own strengths, no other defense's
        refs = [ln for ln in ax.get_lines() if ln.get_label().startswith("no defense")]
        assert refs and all(len(set(ln.get_ydata())) == 1 for ln in refs)  # horizontal
    want_ref = {0.9, 0.8}  # undefended MP and AP
    got_ref = {
        round(float(ln.get_ydata()[0]), 6)
        for ax in panels
        for ln in ax.get_lines()
        if ln.get_label().startswith("no defense")
    }
    assert got_ref == want_ref
    scales = {ax.get_title(): ax.get_xscale() for ax in panels}
    assert scales == {"gdp": "log", "gs": "linear", "mid": "log"}  # > a decade: log
    # the other axis: a panel per defense too, a line per that defense's strengths
    for ax in by_partition.axes:
        labels = {ln.get_label() for ln in ax.get_lines()}
        want = {f"{s:g}" for s in STRENGTHS[ax.get_title()]} | {"no defense"}
        assert labels == want


def test_error_bars_only_where_a_cell_has_three_seeds(
    drawn: list[Figure], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agg has 3 seeds, split 2: one bar (at agg); by_axis's CI is NaN below 3 seeds."""
    real = axis_plots.by_axis_table

    def nan_below_three(long: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        table = real(long, keys)
        for column in [c for c in table.columns if c.endswith("_n")]:
            metric = column[: -len("_n")]
            few = table[column] < 3
            table.loc[few, [f"{metric}_ci_lo", f"{metric}_ci_hi"]] = np.nan
        return table

    monkeypatch.setattr(axis_plots, "by_axis_table", nan_below_three)
    rows = []
    for seed, partitions in ((0, ("agg", "split")), (1, ("agg", "split")), (2, ("agg",))):
        for partition in partitions:
            rows += training(0.8 + seed / 100, seed=seed, partition=partition)
    assert draw_axes(rows, tmp_path) == ["axis_partition.png"]
    (fig,) = drawn
    mp = fig.axes[0]
    assert mp.get_title().startswith("mp vs partition")
    (bars,) = mp.collections  # the one error bar's segments
    (segment,) = bars.get_segments()
    assert segment[:, 0].tolist() == [0.0, 0.0]  # at agg (position 0), not split
    assert "bars: 95% CI where n ≥ 3 seeds" in title(fig)

    drawn.clear()
    two_seeds = [r for r in rows if r["seed"] < 2]
    draw_axes(two_seeds, tmp_path)
    (fig,) = drawn
    assert all(not ax.collections for ax in fig.axes)
    assert "mean over seeds (n < 3: no interval)" in title(fig)


def test_defense_figure_bands_the_undefended_value_only_with_three_seeds(
    drawn: list[Figure], tmp_path: Path
) -> None:
    draw_axes(defense_rows(seeds=3), tmp_path)
    (fig,) = drawn
    for ax in fig.axes:
        assert len(ax.patches) == 1  # the undefended CI band
        (bars,) = ax.collections  # a bar per strength
        assert len(bars.get_segments()) == len(STRENGTHS[ax.get_title()])
    drawn.clear()
    draw_axes(defense_rows(seeds=2), tmp_path)
    (fig,) = drawn
    assert all(not ax.patches and not ax.collections for ax in fig.axes)
    assert "(n < 3: no interval)" in title(fig)


def ap_mp_dcs(chance: object) -> pd.DataFrame:
    rows = training(0.9, {"dli": ("LI", 0.8, None)})
    rows += training(0.8, {"dli": ("LI", 0.5, None)}, defense="gdp", defense_param=0.1)
    rows += training(0.7, {"dli": ("LI", 0.4, None)}, defense="gs", defense_param=99.0)
    dcs = prepare(frame(rows), 0.5)
    if chance is None:  # records written before the column existed
        return dcs.drop(columns=["ap_chance"], errors="ignore")
    dcs["ap_chance"] = chance
    return dcs


def chance_lines(fig: Figure) -> list:
    return [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == plots.CHANCE_LABEL]


def test_ap_mp_panels_draw_the_no_information_baseline(drawn: list[Figure], tmp_path: Path) -> None:
    points = ap_mp_points(ap_mp_dcs(0.62))
    assert points["ap_chance"].tolist() == pytest.approx([0.62] * 3)
    plots.plot_ap_mp(points, "dli", tmp_path / "a.png")
    (line,) = chance_lines(drawn[0])
    assert set(np.asarray(line.get_ydata(), dtype=float)) == {0.62}
    assert line.get_linestyle() == "--"

    for chance in (None, float("nan")):  # older records: no column, or no value
        drawn.clear()
        points = ap_mp_points(ap_mp_dcs(chance))
        assert ("ap_chance" in points.columns) == (chance is not None)
        plots.plot_ap_mp(points, "dli", tmp_path / "b.png")
        assert chance_lines(drawn[0]) == []


def test_defense_colours_differ_and_stay_put() -> None:
    styles = plots.defense_styles(["none", "gdp", "gs", "ldp", "gper", "mid", "dcor", "mid+gs"])
    assert styles["none"].color == plots.NONE_COLOR
    for a, b in (("gdp", "gs"), ("ldp", "gper"), ("mid", "dcor"), ("gs", "mid+gs")):
        gap = np.abs(np.subtract(to_rgb(styles[a].color), to_rgb(styles[b].color))).sum()
        assert gap > 0.5, (a, b)
        assert styles[a].marker != styles[b].marker
    colours = [s.color for s in styles.values()]
    assert len(set(colours)) == len(colours)
    assert plots.defense_styles(["gs"])["gs"] == styles["gs"]  # the same in every figure
    assert plots.defense_order(["mid", "none", "gs", "gdp"]) == ["none", "gdp", "gs", "mid"]


def test_ap_mp_and_axis_figures_use_the_defense_palette(
    drawn: list[Figure], tmp_path: Path
) -> None:
    styles = plots.defense_styles(["gdp", "gs"])
    plots.plot_ap_mp(ap_mp_points(ap_mp_dcs(None)), "dli", tmp_path / "a.png")
    (ax,) = drawn[0].axes
    colours = {tuple(c[:3]) for c in ax.collections[0].get_facecolors()}
    assert colours == {tuple(to_rgb(styles[d].color)) for d in ("gdp", "gs")}
    handles = {t.get_text() for t in drawn[0].legends[0].get_texts()}
    assert {"gdp", "gs", "undefended"} <= handles

    drawn.clear()  # defense without strengths as an axis: lines per defense in its colour
    rows = []
    for partition in ("agg", "split"):
        rows += training(0.9, partition=partition)
        rows += training(0.8, partition=partition, defense="gdp")
        rows += training(0.7, partition=partition, defense="gs")
    _, axes = flatten(frame(rows))
    assert axes == ["defense", "partition"]
    draw_axes(rows, tmp_path)
    by_partition = drawn[1].axes[0]
    got = {ln.get_label(): to_rgb(ln.get_color()) for ln in by_partition.get_lines()}
    assert got["defense=gdp"] == to_rgb(styles["gdp"].color)
    assert got["defense=gs"] == to_rgb(styles["gs"].color)
    assert got["defense=none"] == (0.0, 0.0, 0.0)


def test_panels_prefer_attack_advantage_over_ap() -> None:
    long = pd.DataFrame(
        {"metric": ["rounds", "ap:grn", "adv:dli", "mp", "ap:dli"], "value": [1.0] * 5}
    )
    assert panel_metrics(long) == ["mp", "adv:dli", "ap:grn"]


def texts(fig: Figure) -> list[str]:
    """Every piece of text a reader sees: titles, labels, tick labels, legends."""
    out = [fig._suptitle.get_text()]
    for ax in (a for a in fig.axes if a.get_visible()):
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        legend = ax.get_legend()
        out += [t.get_text() for t in legend.get_texts()] if legend else []
    return out


def test_issue_42_figures_facet_by_dataset_and_draw_only_the_varied_axes(
    drawn: list[Figure], tmp_path: Path
) -> None:
    """adult and digits, FedSGD and FedBCD q=5, MID: a figure for protocol and for the
    defense only (epochs, batch_size and model are each dataset's defaults; q belongs to
    the protocol), every panel one dataset's numbers, legends free of ``nan``."""
    _, rows = issue_42(tmp_path)
    _, cell_axes = long_table(rows)
    assert {"epochs", "batch_size", "model", "protocol_params.q"} <= set(cell_axes)
    assert draw_axes(rows, tmp_path) == ["axis_defense.png", "axis_protocol.png"]
    clean = pd.DataFrame([r for r in rows if r["attack"] == "none"])
    want = clean.groupby(["dataset", "protocol", "defense_param"], dropna=False)["mp"].mean()
    for fig in drawn:
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert len(panels) == 4 * 2  # (mp, adv:ds, adv:ns, adv:pmc) x (adult, digits)
        heads = [ax.get_title().split("\n")[0] for ax in panels]
        assert heads == ["dataset=adult", "dataset=digits"] * 4
        for ax, head in zip(panels[:2], heads[:2], strict=True):  # the MP row
            dataset = head.split("=")[1]
            means = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
            got = {round(float(y), 6) for ln in means for y in ln.get_ydata()}  # no caps
            assert got == {round(v, 6) for v in want[dataset]}, (fig, head)  # no pooling
        for ax, metric in ((panels[3], "adv:ds"), (panels[5], "adv:ns")):  # binary-only:
            assert [t.get_text() for t in ax.texts] == [f"no {metric} rows here"]  # not digits
        seen = texts(fig)
        assert not [t for t in seen if "nan" in t.lower()], seen
        assert "batch_size, epochs, model follow dataset" in title(fig)
    by_strength = drawn[0].axes[0].get_legend().get_texts()
    assert {t.get_text() for t in by_strength} >= {"protocol=fedsgd", "protocol=fedbcd q=5"}
    assert [t.get_text() for t in drawn[1].axes[6].get_xticklabels()] == ["fedsgd", "fedbcd q=5"]


def test_titles_fit_inside_the_figure_above_the_panels(drawn: list[Figure], tmp_path: Path) -> None:
    """A two-panel-wide figure with a long title: it wraps, and the renderer measures it
    inside the figure's width and above every panel's own title."""
    _, rows = issue_42(tmp_path)
    draw_axes(rows, tmp_path)
    for fig in drawn:
        renderer = FigureCanvasAgg(fig).get_renderer()  # closed: a canvas of its own
        fig.draw(renderer)  # positions every title as savefig would
        box, frame_box = fig._suptitle.get_window_extent(renderer), fig.bbox
        assert fig._suptitle.get_text().count("\n") >= 1  # too long for one line here
        assert frame_box.x0 <= box.x0 and box.x1 <= frame_box.x1
        assert box.y1 <= frame_box.y1
        for ax in (a for a in fig.axes if a.get_visible()):
            head = ax.title.get_window_extent(renderer)
            assert head.y1 <= box.y0 and frame_box.x0 <= head.x0 <= head.x1 <= frame_box.x1


def _overlaps(a: object, b: object) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1  # type: ignore[attr-defined]


def test_gap_and_ap_mp_figures_keep_titles_inside_and_legends_off_the_data(
    drawn: list[Figure], tmp_path: Path
) -> None:
    """Issue 63: the ``dcs_gap`` and ``ap_mp`` figures clipped their titles at the figure's
    edge and drew legends over the data. Measured by the renderer: each title inside the
    figure and above every panel's title, each legend outside every panel."""
    from analysis.gaps import dcs_gaps, parse_compare
    from tests.test_analysis_report import two_partitions

    long = "partition=agg:split"
    pairs = dcs_gaps(prepare(two_partitions(), 0.5), parse_compare(long))
    plots.plot_gaps(pairs, parse_compare(long), tmp_path / "gap.png")
    dcs = ap_mp_dcs(0.62)
    dcs["scenario"] = "a scenario whose name is far longer than one panel is wide: " * 2
    plots.plot_ap_mp(ap_mp_points(dcs), "dli", tmp_path / "apmp.png")
    assert len(drawn) == 2
    for fig in drawn:
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        frame_box, head = fig.bbox, fig._suptitle.get_window_extent(renderer)
        assert frame_box.x0 <= head.x0 and head.x1 <= frame_box.x1 and head.y1 <= frame_box.y1
        panels = [a for a in fig.axes if a.get_visible()]
        legends = [*fig.legends, *(a.get_legend() for a in panels if a.get_legend())]
        assert legends
        for ax in panels:
            title = ax.title.get_window_extent(renderer)
            assert title.y1 <= head.y0 and frame_box.x0 <= title.x0 <= title.x1 <= frame_box.x1
            for legend in legends:
                assert not _overlaps(legend.get_window_extent(renderer), ax.bbox)
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert frame_box.x0 <= box.x0 and box.x1 <= frame_box.x1 and box.y0 >= frame_box.y0
        for ax in panels:  # the y label inside the figure (it was cut at the left edge)
            assert ax.yaxis.label.get_window_extent(renderer).x0 >= frame_box.x0
