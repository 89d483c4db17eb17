// The router: the hash names a view and its parameters; a view draws into <main>. A view marked
// live is drawn again when the jobs folder's stamp changes, without reloading the page.

import { errorBox } from "./dom.js";
import { runsView, runView } from "./runs.js";
import { trialView } from "./trial.js";
import { compareView } from "./compare.js";
import { decisionView, searchView } from "./records.js";

const views = {
  "": { draw: runsView, live: true },
  run: { draw: runView, live: true },
  trial: { draw: trialView, live: false },
  compare: { draw: compareView, live: true },
  decision: { draw: decisionView, live: false },
  search: { draw: searchView, live: true },
};

function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [name, query] = hash.split("?");
  return { name: name || "", params: Object.fromEntries(new URLSearchParams(query || "")) };
}

let drawing = 0;
let lastStamp = null;
// A redraw owed while the person is typing in a filter: drawn when the field loses focus, so
// a live page never takes the text out from under the cursor.
let owed = false;

function typing() {
  const a = document.activeElement;
  return a && (a.tagName === "INPUT" || a.tagName === "SELECT") && document.getElementById("main").contains(a);
}

async function draw() {
  const { name, params } = route();
  const view = views[name];
  const main = document.getElementById("main");
  const crumbs = document.getElementById("crumbs");
  const mine = ++drawing;
  document.body.dataset.state = "loading";
  try {
    const content = view ? await view.draw(params) : errorBox("no view " + name);
    if (mine !== drawing) return;
    main.replaceChildren(content.node || content);
    crumbs.replaceChildren(...(content.crumbs || []));
  } catch (e) {
    if (mine !== drawing) return;
    main.replaceChildren(errorBox(e));
  }
  document.body.dataset.state = "ready";
  document.body.dataset.view = name || "runs";
}

async function poll() {
  try {
    const r = await fetch("/api/stamp", { credentials: "same-origin", cache: "no-store" });
    if (r.ok) {
      const { stamp } = await r.json();
      const live = document.getElementById("live");
      live.textContent = "live";
      if (lastStamp !== null && stamp !== lastStamp) {
        const view = views[route().name];
        if (view && view.live && document.body.dataset.state === "ready") {
          if (typing()) {
            owed = true;
          } else {
            document.body.dataset.redraws = String(Number(document.body.dataset.redraws || 0) + 1);
            await draw();
          }
        }
      }
      lastStamp = stamp;
    }
  } catch (_) {
    document.getElementById("live").textContent = "disconnected";
  }
  setTimeout(poll, 1500);
}

// The token came in the address; the cookie carries it from here, so it leaves the bar.
if (new URLSearchParams(location.search).has("token")) {
  history.replaceState(null, "", location.pathname + location.hash);
}
window.addEventListener("hashchange", () => { owed = false; draw(); });
document.addEventListener("focusout", () => setTimeout(() => {
  if (owed && !typing()) {
    owed = false;
    draw();
  }
}, 0));
draw();
poll();
