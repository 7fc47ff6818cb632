(function () {
  "use strict";
  // Sorting and filtering of the dashboard's grid (views/dashboard.py). ?sort=drop|noise|cost|name,
  // ?q=TEXT and ?alert=KEY|look preselect them. A link to a verdict or a configuration opens the
  // <details> holding it. The time the page took to be ready is left on <html data-ready-ms>.
  var grid = document.getElementById("grid");
  var params = new URLSearchParams(location.search);
  if (grid) {
    var body = grid.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sections = {};
    Array.prototype.forEach.call(document.querySelectorAll("details.config"), function (d) { sections[d.id] = d; });
    var buttons = Array.prototype.slice.call(document.querySelectorAll("#controls button[data-sort]"));
    var search = document.getElementById("q");
    var alertChoice = document.getElementById("alert");
    var shown = document.getElementById("shown");
    var state = { sort: params.get("sort") || "name", q: params.get("q") || "", alert: params.get("alert") || "" };
    var number = function (row, key) { var v = parseFloat(row.getAttribute("data-" + key)); return isNaN(v) ? Infinity : v; };
    var apply = function () {
      var sorted = rows.slice();
      if (state.sort !== "name") {
        sorted.sort(function (a, b) {
          return number(a, state.sort) - number(b, state.sort) || a.dataset.name.localeCompare(b.dataset.name);
        });
      }
      var words = state.q.toLowerCase().split(/\s+/).filter(Boolean);
      var count = 0;
      sorted.forEach(function (row) {
        var alert = row.dataset.alert;
        var keep = words.every(function (w) { return row.dataset.name.indexOf(w) >= 0; }) &&
          (!state.alert || alert === state.alert || (state.alert === "look" && (alert === "regressed" || alert === "failed")));
        row.hidden = !keep;
        var section = sections[row.dataset.config];
        if (section) { section.hidden = !keep; }
        count += keep ? 1 : 0;
        body.appendChild(row);
      });
      buttons.forEach(function (b) { b.setAttribute("aria-pressed", String(b.dataset.sort === state.sort)); });
      if (shown) { shown.textContent = count + " of " + rows.length + " shown"; }
    };
    buttons.forEach(function (b) { b.addEventListener("click", function () { state.sort = b.dataset.sort; apply(); }); });
    if (search) { search.value = state.q; search.addEventListener("input", function () { state.q = search.value; apply(); }); }
    if (alertChoice) {
      alertChoice.value = state.alert;
      alertChoice.addEventListener("change", function () { state.alert = alertChoice.value; apply(); });
    }
    apply();
    var wrap = document.getElementById("grid-wrap");
    var toNewest = function () { if (wrap) { wrap.scrollLeft = wrap.scrollWidth - wrap.clientWidth; } };
    toNewest(); // the newest nights and tonight's figures in view
    window.addEventListener("load", function () { toNewest(); setTimeout(toNewest, 50); });
  }
  // A chart wider than a phone's screen scrolls sideways: its newest nights in view when it opens.
  var chartsToNewest = function (root) {
    Array.prototype.forEach.call(root.querySelectorAll(".chartwrap"), function (w) { w.scrollLeft = w.scrollWidth; });
  };
  document.addEventListener("toggle", function (e) { if (e.target.open) { chartsToNewest(e.target); } }, true);
  window.addEventListener("load", function () {
    chartsToNewest(document);
    setTimeout(function () { chartsToNewest(document); }, 50);
  });
  var reveal = function () {
    var id = decodeURIComponent(location.hash.slice(1));
    var target = id && document.getElementById(id);
    if (!target) { return; }
    for (var d = target.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) { d.open = true; }
    target.scrollIntoView();
  };
  window.addEventListener("hashchange", reveal);
  reveal();
  void document.body.offsetHeight; // layout done before the time is taken
  document.documentElement.setAttribute("data-ready-ms", String(Math.round(performance.now())));
})();
