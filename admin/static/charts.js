// A small line chart in SVG for the console: time on x, one polyline per series, each scaled to
// its own maximum (the legend gives the values), with gaps where a sample has no value.
"use strict";

const Charts = (() => {
  const COLORS = ["#2157a5", "#c2410c", "#15803d", "#7c3aed", "#a16207", "#0e7490"];
  const NS = "http://www.w3.org/2000/svg";
  const W = 600, H = 160, PAD = 4;

  function node(tag, attributes) {
    const n = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attributes)) n.setAttribute(k, v);
    return n;
  }

  function short(n) {
    const a = Math.abs(n);
    if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (a >= 1e3) return (n / 1e3).toFixed(1) + "k";
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  function svg(times, series) {
    const root = node("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img" });
    if (times.length < 2) {
      const text = node("text", { x: 10, y: 20, fill: "#6b7380", "font-size": 12 });
      text.textContent = "collecting samples…";
      root.append(text);
      return root;
    }
    const t0 = times[0], t1 = times[times.length - 1];
    const x = (t) => PAD + ((t - t0) / (t1 - t0 || 1)) * (W - 2 * PAD);
    for (let g = 1; g < 4; g += 1) {
      root.append(node("line", { x1: 0, x2: W, y1: (H * g) / 4, y2: (H * g) / 4, stroke: "#e6e9ee" }));
    }
    series.forEach((values, i) => {
      const top = Math.max(...values.filter((v) => v !== null), 0) || 1;
      const y = (v) => H - PAD - (v / top) * (H - 2 * PAD);
      let points = [];
      const flush = () => {
        if (points.length) {
          root.append(node("polyline", { points: points.join(" "), fill: "none",
            stroke: COLORS[i % COLORS.length], "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
        }
        points = [];
      };
      values.forEach((v, k) => {
        if (v === null) flush();
        else points.push(`${x(times[k]).toFixed(1)},${y(v).toFixed(1)}`);
      });
      flush();
    });
    return root;
  }

  return { svg, short, color: (i) => COLORS[i % COLORS.length] };
})();
