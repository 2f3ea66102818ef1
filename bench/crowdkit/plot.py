"""The picture of a bench/crowd.py run (`--plot FILE`, or `--replot RUN.json --plot FILE`): one panel per
arm, the same time axis for all, memory in use stacked by agent (each agent one colour in every
panel), the container's cap as a dashed line, every OOM kill as a red cross on it, and the lower
bound as a dotted line. Jobs that ran on a cluster's nodes (res-overflow: memory outside the
workstation) are stacked the same way below zero, hatched. A person sees at a glance which arm fills the machine, which one dies at its
cap, and which one finishes when. Needs matplotlib (the `bench` extra)."""
from __future__ import annotations

GIB = 1 << 30
OOM_COLOUR = "#d62728"


def plot(doc: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: a file
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    arms, cap, agents = doc["arms"], doc["mem_gb"], doc["agents"]
    bound = doc["bound"]["bound"]
    from matplotlib.colors import to_hex

    # agents' colours: never the OOM red
    palette = [c for c in plt.get_cmap("tab20" if agents > 9 else "tab10").colors if to_hex(c) != OOM_COLOUR]
    colour = [palette[i % len(palette)] for i in range(agents)]
    end = max([r["makespan_s"] for r in arms] + [bound]) * 1.03
    # below zero: the cluster's part (its samples keyed "c<agent>"), as deep as its largest stack
    remote = max((sum(v for k, v in s[2].items() if k.startswith("c")) for r in arms for s in r["samples"]
                  if len(s) > 2), default=0) / GIB
    n_legend = agents + 3 + bool(remote)
    rows = -(-n_legend // 8)  # legend rows
    top_in = 0.3 + 0.2 * rows  # the title and the legend above the panels, in inches
    height = 1.75 * len(arms) + 0.8 + top_in
    fig, axes = plt.subplots(len(arms), 1, figsize=(11, height), sharex=True, sharey=True, squeeze=False)
    for ax, r in zip(axes[:, 0], arms):
        samples = r["samples"]
        t = [s[0] for s in samples]
        if samples and len(samples[0]) > 2:  # memory by agent
            stacks = [[s[2].get(str(a), 0) / GIB for s in samples] for a in range(agents)]
            ax.stackplot(t, *stacks, colors=colour, linewidth=0, step="post")
            there = [[-s[2].get(f"c{a}", 0) / GIB for s in samples] for a in range(agents)]
            if any(any(x) for x in there):
                for poly in ax.stackplot(t, *there, colors=colour, linewidth=0, step="post"):
                    poly.set_hatch("///")
                    poly.set_edgecolor("white")
                ax.axhline(0, color="black", linewidth=0.8)
        else:  # a run from before per-agent samples: the container's total only
            ax.fill_between(t, [(s[1] or 0) / GIB for s in samples], step="post", color="#999999", linewidth=0)
        ax.axhline(cap, color="black", linewidth=1.2, linestyle="--")
        ax.axvline(bound, color="#555555", linewidth=0.9, linestyle=":")
        kills = [a["ended"] for a in r["attempts"] if a["rc"] in (-9, 137)]
        if kills:
            ax.scatter(kills, [cap] * len(kills), marker="x", s=46, linewidths=1.6, color=OOM_COLOUR, zorder=5,
                       clip_on=False)
        ratio = r["makespan_s"] / bound
        lost = f", {r['failed']} job{'s' if r['failed'] != 1 else ''} lost" if r["failed"] else ""
        if r.get("cluster") is not None:
            lost += f"; {len(r['cluster']['sent'])} of {r['cluster']['attempts']} attempts ran on the cluster"
        ax.set_title(f"{r['arm']}: done in {r['makespan_s']:.0f} s = {ratio:.2f}× the bound; "
                     f"{r['oom_killed']} OOM kills{lost}", loc="left", fontsize=10)
        ax.set_ylim(-remote * 1.1, cap * 1.18)
        ax.set_xlim(0, end)
        ax.grid(axis="y", alpha=0.25)
    axes[-1, 0].set_xlabel("seconds since the first job was asked for")
    fig.supylabel("memory in use, GB (stacked by agent)", fontsize=10)
    mix = f"{doc['mix']} mix" + (" (smoke)" if doc.get("smoke") else "")
    fig.suptitle(f"{agents} agents on a {cap:g} GB workstation, {doc['cores']} cores, {mix}", fontsize=12,
                 y=1 - 0.1 / height, va="top")
    handles = [Patch(color=colour[a], label=f"agent {a}") for a in range(agents)]
    handles += [Line2D([], [], color="black", linestyle="--", label=f"cap {cap:g} GB"),
                Line2D([], [], color=OOM_COLOUR, marker="x", linestyle="", markersize=7, label="OOM kill (at its own limit or the cap)"),
                Line2D([], [], color="#555555", linestyle=":", label=f"lower bound {bound:.0f} s")]
    if remote:
        handles.append(Patch(facecolor="#bbbbbb", hatch="///", edgecolor="white", label="on the cluster (below 0)"))
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1 - 0.4 / height), ncol=min(n_legend, 8),
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - top_in / height))
    fig.savefig(path, dpi=100)
    plt.close(fig)
