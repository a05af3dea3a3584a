// The inspector's live turn: follow /chats/<id>/live/events (server-sent events) and
// redraw the turn as it changes. Text goes in through textContent only, never as HTML.
"use strict";
(function () {
  const root = document.getElementById("live");
  if (!root || !window.EventSource) return;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  function figures(turn) {
    const r = turn.request || {};
    let line = "started " + (turn.started_at || "").slice(0, 19).replace("T", " ");
    line += " · model calls " + turn.rounds;
    if (r.tokens !== undefined) {
      line += " · request ~" + r.tokens.toLocaleString() + " of " + r.window.toLocaleString();
      line += " tokens · " + r.messages + " messages · " + r.images + " images · ";
      line += (r.tools || []).length + " tools";
    }
    return line;
  }

  function draw(turn) {
    const parts = [];
    if (turn.state === "none") {
      const head = el("h2", "No turn yet ");
      head.append(el("span", "none", "state none"));
      parts.push(head);
    } else {
      const head = el("h2", "Turn for message #" + turn.inbound_id + " ");
      head.append(el("span", turn.state, "state " + turn.state));
      parts.push(head, el("p", figures(turn), "muted"));
      parts.push(el("h3", "The reply"), el("pre", turn.reply || "(nothing yet)"));
      parts.push(el("h3", "Tool calls"));
      const tools = el("ol");
      for (const t of turn.tools || []) {
        const item = el("li");
        item.append(el("code", t.name + "(" + t.arguments + ")"));
        item.append(el("pre", t.result === null ? "(running…)" : t.result));
        tools.append(item);
      }
      if (!tools.children.length) tools.append(el("li", "none", "muted"));
      parts.push(tools, el("h3", "The request's last messages"));
      const request = el("ol");
      for (const m of (turn.request || {}).last || []) {
        const item = el("li");
        item.append(el("b", m.role), el("pre", m.text));
        request.append(item);
      }
      parts.push(request);
    }
    root.replaceChildren(...parts);
  }

  const source = new EventSource(root.dataset.events);
  source.addEventListener("turn", function (event) {
    draw(JSON.parse(event.data));
  });
})();
