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
