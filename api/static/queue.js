// The queue page: fetch the queue's rows every few seconds and swap them in, so it stays current without a reload.
(function () {
  "use strict";
  var box = document.getElementById("queue");
  if (!box) { return; }
  var every = 2000;
  function refresh() {
    fetch(box.dataset.src, { headers: { "Accept": "text/html" }, cache: "no-store" })
      .then(function (r) { return r.text().then(function (t) { return { ok: r.ok, text: t }; }); })
      .then(function (r) {
        if (r.ok) { box.innerHTML = r.text; box.classList.remove("offline"); }
        else { box.classList.add("offline"); }
      })
      .catch(function () { box.classList.add("offline"); })
      .then(function () { setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
