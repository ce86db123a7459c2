// kiln dashboard: a job's log. Fetches further windows of a step as the
// reader scrolls, drops lines far above so the page holds at most MAX line
// elements, and follows a running job's new lines over server-sent events
// from the position the page holds (resumed by the browser after a
// reconnect through Last-Event-ID). Without JavaScript the page still
// works: the "Next lines" links page through the log.
(function () {
  "use strict";
  var log = document.getElementById("log");
  if (!log) return;
  var base = log.dataset.base, MAX = 1500;
  var count = log.querySelectorAll("ol.log > li").length;

  function lists() { return Array.prototype.slice.call(log.querySelectorAll("ol.log")); }
  function listOf(step) { return log.querySelector('ol.log[data-step="' + step + '"]'); }

  // add appends server-rendered list items to a step's list, skipping any
  // it already holds, then trims the page back under MAX lines.
  function add(ol, html) {
    var t = document.createElement("template");
    t.innerHTML = html;
    var last = +ol.dataset.last;
    Array.prototype.slice.call(t.content.children).forEach(function (li) {
      var seq = +li.dataset.seq;
      if (seq <= last) return;
      ol.appendChild(li);
      last = seq;
      count++;
    });
    ol.dataset.last = last;
    trim(ol);
  }

  function trim(keep) {
    var order = [keep].concat(lists().filter(function (o) { return o !== keep; }));
    for (var i = 0; i < order.length && count > MAX; i++) {
      var ol = order[i];
      while (count > MAX && ol.firstElementChild && ol.children.length > 1) {
        ol.removeChild(ol.firstElementChild);
        count--;
        ol.dataset.trimmed = "1";
      }
      earlier(ol);
    }
  }

  // earlier links a trimmed list to the window before its first line.
  function earlier(ol) {
    if (!ol.dataset.trimmed || !ol.firstElementChild) return;
    var a = ol.previousElementSibling;
    if (!a || !a.classList.contains("earlier")) {
      a = document.createElement("a");
      a.className = "earlier";
      a.textContent = "Earlier lines";
      ol.parentNode.insertBefore(a, ol);
    }
    var first = +ol.firstElementChild.dataset.seq;
    a.href = base + "?step=" + ol.dataset.step + "&after=" + Math.max(0, first - 1001) + "#s" + ol.dataset.step + "-L" + (first - 1);
  }

  var loading = false;
  function more(a) {
    if (loading) return;
    var ol = listOf(a.dataset.step);
    loading = true;
    fetch(base + "/lines?step=" + ol.dataset.step + "&after=" + ol.dataset.last, { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error(r.status);
        var hasMore = r.headers.get("X-Kiln-More") === "true";
        return r.text().then(function (html) {
          add(ol, html);
          if (!hasMore) { a.remove(); delete ol.dataset.more; }
          else a.href = base + "?step=" + ol.dataset.step + "&after=" + ol.dataset.last;
        });
      })
      .catch(function () {})
      .then(function () { loading = false; if (document.body.contains(a) && visible(a)) more(a); });
  }
  function visible(el) { var r = el.getBoundingClientRect(); return r.top < window.innerHeight + 400 && r.bottom > 0; }
  if ("IntersectionObserver" in window) {
    var io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) { if (e.isIntersecting) more(e.target); });
    }, { rootMargin: "400px" });
    log.querySelectorAll("a.more").forEach(function (a) { io.observe(a); });
  }

  if (!log.dataset.live || !window.EventSource) return;
  var status = document.getElementById("live");
  var pos = log.dataset.attempt + "|" + lists().map(function (o) { return o.dataset.step + ":" + o.dataset.last; }).join(",");
  var es = new EventSource(base + "/follow?from=" + encodeURIComponent(pos));
  es.onmessage = function (e) {
    var d = JSON.parse(e.data), ol = listOf(d.s);
    if (!ol || d.q <= +ol.dataset.last) return;
    var atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    var cls = d.c === "stderr" ? ' class="err-line"' : d.c === "system" ? ' class="sys-line"' : "";
    add(ol, '<li id="s' + d.s + "-L" + d.q + '" data-seq="' + d.q + '"' + cls + '><a class="ln" href="#s' + d.s + "-L" + d.q +
      '" tabindex="-1">' + d.q + '</a><span class="tx">' + d.h + "</span></li>");
    var det = ol.closest("details");
    if (det && !det.open) det.open = true;
    if (atEnd) window.scrollTo(0, document.body.scrollHeight);
  };
  es.addEventListener("end", function () {
    es.close();
    if (status) status.textContent = "The job finished.";
    log.dataset.ended = "1";
  });
  es.addEventListener("attempt", function () { es.close(); location.reload(); });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED && status) status.textContent = "Live updates stopped; reload the page.";
    else if (status) status.textContent = "Reconnecting…";
  };
  es.onopen = function () { if (status) status.textContent = "Live: following new lines"; };
})();
