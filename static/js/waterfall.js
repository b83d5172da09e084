// The run waterfall's bars are SVG links, which htmx attributes would double in size: one listener
// opens a bar's event in the drawer or swaps in the chart of another window (a bucket, the zoom
// links). Delegated from the document, so a link swapped in a moment ago works before htmx has
// processed it. Without JavaScript the links navigate.
document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("#waterfall a[data-waterfall]");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey) return;
  event.preventDefault();
  const url = link.getAttribute("href");
  if (link.dataset.waterfall === "event") {
    htmx.ajax("GET", url, { target: "#drawer" });
  } else {
    htmx.ajax("GET", url, { target: "#waterfall", swap: "outerHTML" }).then(() => history.pushState({ waterfall: true }, "", url));
  }
});
// Keyboard: Enter on a focused bar follows it (SVG links get no click from Enter in every
// browser); + and - zoom, the arrow keys move the window, as the zoom links do.
document.addEventListener("keydown", (event) => {
  if (!document.getElementById("waterfall") || event.altKey || event.ctrlKey || event.metaKey) return;
  if (event.target.closest && event.target.closest("input, textarea, select")) return;
  if (event.key === "Enter" && event.target.closest && event.target.closest("#waterfall a[data-waterfall]")) {
    event.preventDefault();
    event.target.closest("a").dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true }));
    return;
  }
  // Zoom keys only where they move nothing else: on the chart or with nothing focused.
  if (event.target !== document.body && !event.target.closest("#waterfall")) return;
  const key = event.key === "=" ? "+" : event.key;
  const control = document.querySelector(`#waterfall [data-zoom-key="${key}"]`);
  if (control) {
    event.preventDefault();
    control.click();
  }
});
// Back and forward through windows: the entries pushed above are not htmx's (it restores only its
// own), so the chart of the window in the address bar is fetched again.
window.addEventListener("popstate", (event) => {
  if (event.state && event.state.htmx) return;
  if (document.getElementById("waterfall")) {
    htmx.ajax("GET", location.href, { target: "#waterfall", swap: "outerHTML" });
  }
});
