// kiln dashboard: a running run's page follows the run over one
// server-sent-event connection (/runs/N/live). Each "update" carries what
// changed since the last one: the run's status badge, the rows of the jobs
// that changed (with their graph nodes' status), and the timeline's new
// items; a (re)connection starts with everything. When the run ends the
// page reloads once, to show its buttons. Without JavaScript the page
// reloads itself every few seconds instead (<noscript> refresh).
(function () {
  "use strict";
  var live = document.getElementById("runlive");
  if (!live || !window.EventSource) return;
  var es = new EventSource(live.dataset.src);
  es.addEventListener("open", function () { live.textContent = "Live: job states update as they change."; });
  es.addEventListener("error", function () { live.textContent = "Reconnecting…"; });
  es.addEventListener("update", function (e) {
    var u = JSON.parse(e.data);
    if (u.status) document.getElementById("run-status").innerHTML = u.status;
    (u.jobs || []).forEach(function (j) {
      var tr = document.getElementById("job-" + j.id);
      if (tr) tr.innerHTML = j.row;
      var g = document.getElementById("node-" + j.id);
      if (g) {
        g.setAttribute("class", "node st-" + j.cls);
        var t = g.querySelector("title");
        if (t) t.textContent = j.title;
      }
    });
    if (u.timeline && u.timeline.length) {
      var ol = document.getElementById("timeline"), none = document.getElementById("no-events");
      if (none) none.remove();
      if (u.timeline_from === 0) ol.innerHTML = "";
      ol.insertAdjacentHTML("beforeend", u.timeline.join(""));
    }
    if (u.end) {
      es.close();
      location.reload();
    }
  });
})();
