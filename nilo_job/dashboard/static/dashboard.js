// The dashboard's one script: no build step, nothing fetched, nothing it needs to work.
// Each <time datetime="..."> (shown in UTC) gets the local time as its title, for hovering;
// the "select all" box of a rows page ticks every row's box.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("time[datetime]").forEach(function (element) {
    var moment = new Date(element.getAttribute("datetime"));
    if (!isNaN(moment.getTime())) {
      element.title = moment.toLocaleString() + " (your local time)";
    }
  });
  var all = document.getElementById("select-all");
  if (all) {
    all.hidden = false;
    all.addEventListener("change", function () {
      document.querySelectorAll("input[name=id]").forEach(function (box) {
        box.checked = all.checked;
      });
    });
  }
});
