// jobengine dashboard: the overview chart (uPlot), times in the reader's zone and the job lists'
// selection. Everything else is htmx + SSE; pages work without this (times then stay in UTC).
(function () {
  "use strict";
  function localTimes(root) {
    var els = (root || document).querySelectorAll("time[data-local]");
    for (var i = 0; i < els.length; i++) {
      var d = new Date(els[i].getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      els[i].title = els[i].textContent;
      els[i].textContent = d.toLocaleString();
      els[i].removeAttribute("data-local");
    }
  }
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
    localTimes(document);
    var el = document.getElementById("chart");
    if (el && el.dataset.series) draw(JSON.parse(el.dataset.series));
  });
  document.addEventListener("htmx:afterSettle", function (e) { localTimes(e.target); });
  // A live list is not replaced under a field being typed in (a queue's limit): its newest frame is held
  // and swapped in once the focus has left the list.
  var held = null;
  function flush() {
    if (held && !held.target.contains(document.activeElement) && typeof htmx !== "undefined") {
      var h = held; held = null;
      htmx.swap(h.target, h.html, { swapStyle: "innerHTML" });
    }
  }
  document.addEventListener("htmx:sseBeforeMessage", function (e) {
    var a = document.activeElement;
    // The job lists' rows hold still by their own rule (below): ticking a box is not typing.
    if (e.target.hasAttribute && e.target.hasAttribute("data-hold-while-selected")) return;
    if (a && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) && e.target.contains(a)) {
      e.preventDefault();
      held = { target: e.target, html: e.detail.data };
      a.addEventListener("blur", function () { setTimeout(flush, 0); }, { once: true });
    } else {
      held = null;
    }
  });
  document.addEventListener("htmx:sseMessage", function (e) {
    localTimes(document);
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
