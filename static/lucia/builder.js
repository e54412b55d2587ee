// The agent builder's page behaviour: a line-number gutter that follows the source, config errors that jump
// to their line, and the progress of a background simulation (polled; the page reloads when it ends).
(function () {
  "use strict";

  function errorLines() {
    var found = {};
    document.querySelectorAll("[data-error-line]").forEach(function (row) {
      found[row.getAttribute("data-error-line")] = true;
    });
    return found;
  }

  function renderGutter(gutter, text, marked) {
    var count = text.split("\n").length;
    if (gutter.childElementCount === count && gutter.getAttribute("data-marked") === "1") { return; }
    var html = [];
    for (var n = 1; n <= count; n++) {
      html.push('<span data-line="' + n + '"' + (marked[n] ? ' class="lucia-error-line"' : "") + ">" + n + "</span>");
    }
    gutter.innerHTML = html.join("");
    gutter.setAttribute("data-marked", "1");
  }

  function goToLine(textarea, line) {
    var lines = textarea.value.split("\n");
    var start = 0;
    for (var i = 0; i < line - 1 && i < lines.length; i++) { start += lines[i].length + 1; }
    var end = start + (lines[line - 1] || "").length;
    textarea.focus();
    textarea.setSelectionRange(start, end);
    var lineHeight = parseFloat(getComputedStyle(textarea).lineHeight) || 20;
    textarea.scrollTop = Math.max(0, (line - 5) * lineHeight);
  }

  function setUpEditor(editor) {
    var gutter = editor.querySelector(".lucia-gutter");
    var source = editor.querySelector(".lucia-source");
    var marked = errorLines();
    var text = function () { return source.value !== undefined ? source.value : source.textContent; };
    renderGutter(gutter, text(), marked);
    source.addEventListener("scroll", function () { gutter.scrollTop = source.scrollTop; });
    source.addEventListener("input", function () { renderGutter(gutter, text(), marked); });
    document.querySelectorAll("[data-goto-line]").forEach(function (link) {
      link.addEventListener("click", function (event) {
        if (source.tagName !== "TEXTAREA") { return; }
        event.preventDefault();
        goToLine(source, parseInt(link.getAttribute("data-goto-line"), 10));
      });
    });
  }

  function describe(progress) {
    var cases = progress.cases_done + " of " + progress.cases_total + " case" + (progress.cases_total === 1 ? "" : "s");
    if (progress.stalled) { return "stopped — no result within the worker's time limit; simulate again."; }
    if (progress.status === "queued") { return "waiting for a worker — " + cases + " done."; }
    if (progress.status === "running") {
      return "running — " + cases + " done" + (progress.current_case ? " (now: " + progress.current_case + ")" : "") + ".";
    }
    if (progress.error) { return "ended without a scorecard: " + progress.error; }
    return progress.status + " — " + cases + ".";
  }

  function pollSimulation(panel) {
    var url = panel.getAttribute("data-progress-url");
    var bar = panel.querySelector("progress");
    var label = panel.querySelector("#lucia-progress-text");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : Promise.reject(response.status); })
        .then(function (progress) {
          bar.max = Math.max(progress.cases_total, 1);
          bar.value = progress.cases_done;
          panel.setAttribute("data-status", progress.status);
          label.textContent = "Simulation #" + progress.id + ": " + describe(progress);
          if (progress.active) { window.setTimeout(tick, 1000); } else { window.location.reload(); }
        })
        .catch(function () { window.setTimeout(tick, 5000); });
    }
    window.setTimeout(tick, 1000);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-lucia-editor]").forEach(setUpEditor);
    var simulation = document.getElementById("lucia-simulation");
    if (simulation && simulation.getAttribute("data-active") === "true") { pollSimulation(simulation); }
    document.querySelectorAll("form[data-disable-on-submit]").forEach(function (form) {
      form.addEventListener("submit", function () {
        form.querySelectorAll("button, input[type=submit]").forEach(function (button) { button.disabled = true; });
      });
    });
  });
})();
