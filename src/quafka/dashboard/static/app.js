// quafka dashboard: live fragment swaps over server-sent events, lag charts (uPlot), local times.
// No inline script anywhere (the CSP forbids it); the server renders and escapes every fragment.
(function () {
  "use strict";
  var COLORS = ["#2563eb", "#d97706", "#059669", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];

  function formatTimes(root) {
    root.querySelectorAll("time[data-ms]").forEach(function (el) {
      var ms = Number(el.getAttribute("data-ms"));
      if (ms > 0) { el.textContent = new Date(ms).toLocaleString(); el.title = new Date(ms).toISOString(); }
    });
  }

  function drawCharts(root) {
    if (typeof uPlot === "undefined") { return; }
    root.querySelectorAll("div.chart[data-chart]").forEach(function (el) {
      var d;
      try { d = JSON.parse(el.getAttribute("data-chart")); } catch (e) { return; }
      el.replaceChildren();
      if (!d.x || d.x.length < 2) {
        var p = document.createElement("p");
        p.className = "empty";
        p.textContent = "Collecting samples…";
        el.appendChild(p);
        return;
      }
      var series = [{}].concat(d.labels.map(function (label, i) {
        return { label: label, stroke: COLORS[i % COLORS.length], width: 2 };
      }));
      var width = Math.max(300, el.clientWidth || 800);
      new uPlot({ width: width, height: 220, series: series, scales: { x: { time: true } },
                  axes: [{}, { label: el.getAttribute("data-unit") || "" }] }, [d.x].concat(d.series), el);
    });
  }

  function connect() {
    var body = document.body;
    var url = body.getAttribute("data-events");
    var status = document.getElementById("status");
    if (!url || typeof EventSource === "undefined") { return; }
    var ids = (body.getAttribute("data-live") || "").split(" ").filter(Boolean);
    var source = new EventSource(url);
    ids.forEach(function (id) {
      source.addEventListener(id, function (event) {
        var old = document.getElementById(id);
        if (!old) { return; }
        var holder = document.createElement("template");
        holder.innerHTML = event.data;
        var fresh = holder.content.firstElementChild;
        if (!fresh || fresh.id !== id) { return; }
        old.replaceWith(fresh);
        formatTimes(fresh);
        drawCharts(fresh);
      });
    });
    source.addEventListener("sample", function (event) {
      body.setAttribute("data-sample-seq", event.data);
      if (status) { status.setAttribute("data-state", "live"); status.textContent = "live"; }
    });
    source.onerror = function () {
      if (status) { status.setAttribute("data-state", "reconnecting"); status.textContent = "reconnecting…"; }
    };
    window.addEventListener("pagehide", function () { source.close(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    formatTimes(document);
    drawCharts(document);
    connect();
  });
})();
