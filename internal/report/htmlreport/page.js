// report.html's script: the flame graphs zoom on click; frame labels are
// cut to what fits (in the SVG's own units, so a resize changes nothing). The page reads nothing from outside itself.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("amdahl-data").textContent);
  var width = 1000;

  function fmtDur(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(3) + "s";
    if (ns >= 1e6) return (ns / 1e6).toFixed(2) + "ms";
    if (ns >= 1e3) return (ns / 1e3).toFixed(1) + "µs";
    return Math.round(ns) + "ns";
  }

  function layout(svg, x0, w0, depth0) {
    var frames = svg.querySelectorAll("g.frame");
    for (var i = 0; i < frames.length; i++) {
      var g = frames[i];
      var x = parseFloat(g.dataset.x), w = parseFloat(g.dataset.w);
      var depth = parseInt(g.dataset.depth, 10);
      var inside = x >= x0 - 1e-12 && x + w <= x0 + w0 + 1e-12;
      var ancestor = x <= x0 + 1e-12 && x + w >= x0 + w0 - 1e-12 && depth < depth0;
      if (!inside && !ancestor) {
        g.classList.add("hidden");
        continue;
      }
      g.classList.remove("hidden");
      var nx = inside ? (x - x0) / w0 * width : 0;
      var nw = inside ? w / w0 * width : width;
      g.setAttribute("transform", "translate(" + nx.toFixed(3) + "," + depth * 18 + ")");
      g.querySelector("rect").setAttribute("width", nw.toFixed(3));
      // The label, cut to what fits (11px monospace: about 6.6 units a
      // character, the text scaling with the frame).
      var text = g.querySelector("text");
      var fit = Math.floor((nw - 6) / 6.6);
      var name = g.dataset.name;
      if (fit < 3) {
        text.textContent = "";
      } else {
        text.textContent = name.length <= fit ? name : name.slice(0, fit - 1) + "\u2026";
      }
    }
  }

  var flames = document.querySelectorAll("figure.flame");
  for (var f = 0; f < flames.length; f++) {
    (function (fig) {
      var svg = fig.querySelector("svg");
      var detail = fig.querySelector(".flame-detail");
      var set = null;
      for (var s = 0; s < (data.sets || []).length; s++) {
        if (data.sets[s].name === fig.dataset.set) set = data.sets[s];
      }
      var units = set ? Math.max(set.flame.units, 1) : 1;
      var total = set ? set.flame.root.critical_ns : 0;
      svg.addEventListener("click", function (ev) {
        var g = ev.target.closest("g.frame");
        if (!g) return;
        var depth = parseInt(g.dataset.depth, 10);
        var x = parseFloat(g.dataset.x), w = parseFloat(g.dataset.w);
        if (depth === 0) {
          layout(svg, 0, 1, 0);
        } else {
          layout(svg, x, w, depth);
        }
        var crit = parseFloat(g.dataset.critical), self = parseFloat(g.dataset.self);
        detail.textContent = g.dataset.name + ": " + fmtDur(crit / units) + " per unit on the critical path (" +
          fmtDur(self / units) + " its own), " + (total > 0 ? (100 * crit / total).toFixed(1) : "0.0") + "% of e2e";
      });
      layout(svg, 0, 1, 0);
    })(flames[f]);
  }
})();
