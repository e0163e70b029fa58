// The dashboard's one script: no build step, nothing fetched, nothing it needs to work.
// Each <time datetime="..."> (shown in UTC) gets the local time as its title, for hovering;
// the "select all" box of a rows page ticks every row's box; and a table wider than its box
// gets the hint above it that says it scrolls sideways, naming the columns out of sight.
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
  var boxes = Array.prototype.slice.call(document.querySelectorAll(".scroll-box"));
  function hint(outer) {
    var box = outer.querySelector(".scroll");
    var note = outer.querySelector(".scroll-hint");
    if (!box || !note) {
      return;
    }
    var edge = box.getBoundingClientRect();
    var left = [];
    var right = [];
    box.querySelectorAll("thead th").forEach(function (th) {
      var name = (th.getAttribute("data-name") || th.textContent).trim();
      var cell = th.getBoundingClientRect();
      if (!name) {
        return;
      }
      var middle = (cell.left + cell.right) / 2;  // a column half in sight counts as out
      if (middle > edge.right) {
        right.push(name);
      } else if (middle < edge.left) {
        left.push(name);
      }
    });
    if (box.scrollWidth <= box.clientWidth + 1 || (!left.length && !right.length)) {
      note.hidden = true;
      return;
    }
    var parts = [];
    if (left.length) {
      parts.push("\u2190 " + left.join(", "));
    }
    if (right.length) {
      parts.push(right.join(", ") + " \u2192");
    }
    note.textContent = "Scroll sideways for the other columns: " + parts.join(" \u00b7 ");
    note.hidden = false;
  }
  boxes.forEach(function (outer) {
    hint(outer);
    var box = outer.querySelector(".scroll");
    if (box) {
      box.addEventListener("scroll", function () { hint(outer); }, { passive: true });
    }
  });
  window.addEventListener("resize", function () { boxes.forEach(hint); });
});
