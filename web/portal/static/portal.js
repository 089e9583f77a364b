// fleetmq portal: progressive enhancement only. Every flow works without
// this script; it adds copy buttons and confirmation dialogs.
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Fallback for plain-HTTP portals: a selected, off-screen textarea.
    return new Promise(function (resolve, reject) {
      var ta = document.createElement("textarea");
      ta.value = text;
      ta.setAttribute("readonly", "");
      ta.style.position = "fixed";
      ta.style.left = "-9999px";
      document.body.appendChild(ta);
      ta.select();
      try {
        document.execCommand("copy") ? resolve() : reject(new Error("copy refused"));
      } catch (e) {
        reject(e);
      } finally {
        document.body.removeChild(ta);
      }
    });
  }

  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest("[data-copy]");
    if (btn) {
      var src = document.getElementById(btn.getAttribute("data-copy"));
      if (!src) return;
      var label = btn.textContent;
      copyText(src.textContent.trim()).then(function () {
        btn.textContent = "Copied";
        btn.classList.add("copied");
        btn.setAttribute("data-copied", "true");
      }, function () {
        // Select the text so that the user can copy it by hand.
        var range = document.createRange();
        range.selectNodeContents(src);
        var sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        btn.textContent = "Press Ctrl+C";
      });
      setTimeout(function () {
        btn.textContent = label;
        btn.classList.remove("copied");
      }, 2000);
      return;
    }

    // Links to a confirmation page open a dialog instead.
    var link = ev.target.closest("a[data-confirm]");
    var dialog = document.getElementById("confirm-dialog");
    if (link && dialog && typeof dialog.showModal === "function" && !ev.ctrlKey && !ev.metaKey && !ev.shiftKey) {
      ev.preventDefault();
      document.getElementById("confirm-dialog-form").setAttribute("action", link.getAttribute("href"));
      document.getElementById("confirm-dialog-title").textContent = link.getAttribute("data-confirm-title") || "Are you sure?";
      document.getElementById("confirm-dialog-message").textContent = link.getAttribute("data-confirm");
      document.getElementById("confirm-dialog-submit").textContent = link.getAttribute("data-confirm-button") || "Confirm";
      dialog.showModal();
      document.getElementById("confirm-dialog-cancel").focus();
    }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var cancel = document.getElementById("confirm-dialog-cancel");
    if (cancel) {
      cancel.addEventListener("click", function () {
        document.getElementById("confirm-dialog").close();
      });
    }
  });
})();
