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
// The overview's chart labels, mark titles and table periods, written on the server in UTC words,
// are written again here in the reader's time zone: `data-moment` on a <time> (one moment) and
// `data-period-start`/`-end` (a column's period, after `data-subject` when there is one).
const zoneName = { timeZoneName: "short" };
const dayWords = new Intl.DateTimeFormat(undefined, { weekday: "short", day: "2-digit", month: "short" });
const dayTime = { day: "2-digit", month: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
const dayTimeWords = new Intl.DateTimeFormat(undefined, dayTime);
const dayTimeZoneWords = new Intl.DateTimeFormat(undefined, { ...dayTime, ...zoneName });
const timeZoneWords = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", hourCycle: "h23", ...zoneName });
const sameLocalDay = (a, b) => a.toDateString() === b.toDateString();
function periodText(start, end) {
  const isMidnight = start.getHours() === 0 && start.getMinutes() === 0;
  if (end - start >= 86_400_000 && isMidnight) return dayWords.format(start);
  const last = new Date(end.getTime() - 1);
  return `${dayTimeWords.format(start)} to ${(sameLocalDay(start, last) ? timeZoneWords : dayTimeZoneWords).format(end)}`;
}
function showLocalPeriods(root) {
  for (const element of root.querySelectorAll("time[data-moment]")) {
    const moment = new Date(element.getAttribute("datetime"));
    if (!Number.isNaN(moment.getTime())) element.textContent = dayTimeZoneWords.format(moment);
  }
  for (const element of root.querySelectorAll("[data-period-start]")) {
    const start = new Date(element.dataset.periodStart);
    const end = new Date(element.dataset.periodEnd);
    if (Number.isNaN(start.getTime()) || Number.isNaN(end.getTime())) continue;
    const period = periodText(start, end);
    const text = element.dataset.subject ? `${element.dataset.subject}, ${period}` : period;
    if (element.tagName === "A") element.title = text;
    else element.textContent = text;
  }
}
function showLocal(root) {
  showLocalTimes(root);
  showLocalPeriods(root);
}
document.addEventListener("DOMContentLoaded", () => showLocal(document));
document.addEventListener("htmx:afterSwap", (event) => showLocal(event.detail.elt.parentElement || document));
// Back and Forward: htmx restores a filtered list from its history snapshot, which keeps the rows
// but not what was typed into the filter form (typed values are not in the markup). The URL holds
// the filters (hx-push-url), so the form is filled from it.
function fillFiltersFromUrl() {
  const params = new URLSearchParams(window.location.search);
  for (const form of document.querySelectorAll("form[data-filters]")) {
    for (const field of form.elements) {
      if (!field.name || field.type === "submit" || field.type === "button") continue;
      if (field.type === "checkbox" || field.type === "radio") {
        field.checked = params.getAll(field.name).includes(field.value);
      } else if (field.tagName === "SELECT" && !params.has(field.name)) {
        field.selectedIndex = 0;
      } else {
        field.value = params.get(field.name) ?? "";
      }
    }
  }
}
document.addEventListener("htmx:historyRestore", fillFiltersFromUrl);
window.addEventListener("popstate", () => window.setTimeout(fillFiltersFromUrl));
