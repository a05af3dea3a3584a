// The chat page: post the message, read the server-sent events of the answer as they
// arrive (fetch's body stream; EventSource cannot POST) and grow the reply in place.
"use strict";
(function () {
  const form = document.getElementById("chat-form");
  const log = document.getElementById("chat-log");
  const box = document.getElementById("chat-text");
  const status = document.getElementById("chat-status");
  const button = document.getElementById("chat-send");

  function bubble(role, text) {
    const item = document.createElement("li");
    item.className = "msg " + role;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = role === "user" ? "you" : "bot";
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    item.append(meta, body);
    log.append(item);
    item.scrollIntoView({ block: "end" });
    return body;
  }

  function parse(frame) {
    let kind = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith("event:")) kind = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).trim());
    }
    return { kind: kind, text: data.length ? JSON.parse(data.join("\n")).text : "" };
  }

  async function send(text) {
    bubble("user", text);
    const reply = bubble("assistant", "…");
    reply.parentElement.classList.add("growing");
    button.disabled = true;
    status.textContent = "the bot is answering…";
    try {
      const answer = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams({ csrf: form.csrf.value, text: text }),
        credentials: "same-origin",
      });
      if (!answer.ok) throw new Error(answer.status + " " + (await answer.text()));
      const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const event = parse(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
          reply.textContent = event.text;
          if (event.kind === "error") reply.parentElement.classList.add("error");
        }
      }
      status.textContent = "";
    } catch (error) {
      reply.parentElement.classList.add("error");
      status.textContent = "Not sent: " + error.message;
    } finally {
      reply.parentElement.classList.remove("growing");
      button.disabled = false;
      box.focus();
    }
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const text = box.value.trim();
    if (!text || button.disabled) return;
    box.value = "";
    send(text);
  });
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
})();
