// Behaviour for the human pages that htmx attributes cannot express. Loaded from our own origin
// so the Content-Security-Policy can forbid inline scripts.
document.addEventListener("click", (event) => {
  if (event.target.closest("[data-close-drawer]")) {
    document.getElementById("drawer").replaceChildren();
  }
});
document.addEventListener("keydown", (event) => {
  const drawer = document.getElementById("drawer");
  if (event.key === "Escape" && drawer) drawer.replaceChildren();
});
// Polling that only matters to someone looking: skipped while the tab is hidden. (An htmx trigger
// filter would need eval, which the CSP forbids.)
document.addEventListener("htmx:beforeRequest", (event) => {
  if (document.hidden && event.detail.elt.closest("[data-poll-visible-only]")) event.preventDefault();
});
// Moments are rendered relative ("4 min ago") with the UTC time on hover; here the hover text is
// rewritten in the reader's own time zone, on load and in every fragment htmx swaps in.
const localTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "long" });
function showLocalTimes(root) {
  for (const element of root.querySelectorAll("time[data-when]")) {
    const moment = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(moment.getTime())) element.title = localTime.format(moment);
  }
}
document.addEventListener("DOMContentLoaded", () => showLocalTimes(document));
document.addEventListener("htmx:afterSwap", (event) => showLocalTimes(event.detail.elt.parentElement || document));
