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
