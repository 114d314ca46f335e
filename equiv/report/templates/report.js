(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var form = document.getElementById("filters");
  var only = form.elements.namedItem("mismatch");
  var label = form.elements.namedItem("label");
  var suite = form.elements.namedItem("suite");
  var count = document.getElementById("shown");
  var query = new URLSearchParams(window.location.search);
  only.checked = query.get("mismatch") === "1";
  label.value = query.get("label") || "";
  suite.value = query.get("suite") || "";
  function apply() {
    var shown = 0;
    data.items.forEach(function (item) {
      var keep = (!only.checked || !item.same) &&
        (!label.value || item.label === label.value) &&
        (!suite.value || item.suite === suite.value);
      [item.id, "row-" + item.id].forEach(function (id) {
        var el = document.getElementById(id);
        if (el) { el.hidden = !keep; }
      });
      if (keep) { shown += 1; }
    });
    count.textContent = shown + " of " + data.items.length + " shown";
    document.body.setAttribute("data-shown", String(shown));
  }
  form.addEventListener("change", apply);
  form.hidden = false;
  apply();
}());
