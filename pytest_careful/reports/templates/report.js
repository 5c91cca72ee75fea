// report.html's only script: filters the conversation rows. It reads data-* attributes and
// sets .hidden and .textContent only; it never builds HTML from the page's text.
(function () {
  "use strict";
  var form = document.getElementById("filters");
  var shown = document.getElementById("shown");
  var rows = Array.prototype.slice.call(document.querySelectorAll("details.conv"));

  function has(list, word) {
    return (" " + list + " ").indexOf(" " + word + " ") >= 0;
  }

  function matches(row, f) {
    var d = row.dataset;
    if (f.category && d.category !== f.category) return false;
    if (f.outcome) {
      var parts = f.outcome.split(":");
      if (d[parts[0]] !== parts[1]) return false;
    }
    if (f.rule === "none" && d.rules !== "") return false;
    if (f.rule && f.rule !== "none" && !has(d.rules, f.rule)) return false;
    if (f.text && d.node.indexOf(f.text) < 0) return false;
    return true;
  }

  function apply() {
    var f = {
      category: form.elements.category.value,
      outcome: form.elements.outcome.value,
      rule: form.elements.rule.value,
      text: form.elements.text.value.trim()
    };
    var count = 0;
    rows.forEach(function (row) {
      var ok = matches(row, f);
      row.hidden = !ok;
      if (ok) count += 1;
    });
    shown.textContent = String(count);
  }

  function openFromHash() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    var row = id ? document.getElementById(id) : null;
    if (row && row.tagName === "DETAILS") {
      row.open = true;
      row.scrollIntoView();
    }
  }

  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (event) { event.preventDefault(); });
  document.getElementById("expand").addEventListener("click", function () {
    rows.forEach(function (row) { if (!row.hidden) row.open = true; });
  });
  document.getElementById("collapse").addEventListener("click", function () {
    rows.forEach(function (row) { row.open = false; });
  });
  window.addEventListener("hashchange", openFromHash);
  apply();
  openFromHash();
})();
