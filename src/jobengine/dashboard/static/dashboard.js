// jobengine dashboard: the overview chart (uPlot) and the job lists' selection. Everything else is htmx +
// SSE; pages work without this.
(function () {
  "use strict";
  var plot = null;
  function draw(series) {
    var el = document.getElementById("chart");
    if (!el || typeof uPlot === "undefined") return;
    var data = [series.t, series.enqueued, series.succeeded, series.failed];
    if (plot) { plot.setData(data); return; }
    var width = Math.max(260, el.clientWidth || 600);
    plot = new uPlot({
      width: width, height: 200,
      series: [{}, { label: "enqueued", stroke: "#1f5fbf" }, { label: "succeeded", stroke: "#1a7f37" },
               { label: "failed", stroke: "#c62828" }],
      axes: [{}, { label: "jobs / min" }],
    }, data, el);
    window.addEventListener("resize", function () { plot.setSize({ width: Math.max(260, el.clientWidth), height: 200 }); });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var el = document.getElementById("chart");
    if (el && el.dataset.series) draw(JSON.parse(el.dataset.series));
  });
  document.addEventListener("htmx:sseMessage", function (e) {
    if (e.detail && e.detail.type === "chart") draw(JSON.parse(e.detail.data));
  });
  // A live list holds still while jobs are ticked, so a new frame does not drop the selection.
  document.addEventListener("htmx:sseBeforeMessage", function (e) {
    var rows = e.target;
    if (rows && rows.hasAttribute && rows.hasAttribute("data-hold-while-selected") &&
        rows.querySelector("input[name=id]:checked")) e.preventDefault();
  });
  // The header's box ticks or clears every job of the page.
  document.addEventListener("change", function (e) {
    var box = e.target;
    if (!box.matches || !box.matches("input[data-select-page]")) return;
    var table = box.closest("table");
    table.querySelectorAll("input[name=id]").forEach(function (b) { b.checked = box.checked; });
  });
})();
