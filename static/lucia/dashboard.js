// Keeps the Studio dashboard current: every few seconds the panels are fetched again (?partial=1) and swapped in.
(function () {
  "use strict";
  function start() {
    var container = document.getElementById("lucia-dashboard");
    if (!container) { return; }
    var seconds = parseInt(container.getAttribute("data-refresh-seconds"), 10) || 30;
    function refresh() {
      var url = new URL(window.location.href);
      url.searchParams.set("partial", "1");
      fetch(url.toString(), {credentials: "same-origin", headers: {"X-Requested-With": "fetch"}})
        .then(function (response) {
          // A lapsed session answers with the login page: reload to show it rather than swap it in.
          if (!response.ok || response.redirected) { window.location.reload(); return null; }
          return response.text();
        })
        .then(function (html) { if (html !== null) { container.innerHTML = html; } })
        .catch(function () { /* offline for a moment: the next poll tries again */ });
    }
    window.setInterval(refresh, seconds * 1000);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
