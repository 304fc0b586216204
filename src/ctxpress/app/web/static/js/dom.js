// Tiny DOM helpers. Text from the service is only ever set as text (never parsed as HTML); the one
// exception is a reply's Markdown, which the service renders and sanitises (markdown.js).

/**
 * `h("p", {class: "x", onclick: fn, hidden: true}, "text", child)`: an element.
 * Attributes: `class`, `dataset` (object), `on<event>` (listener), booleans, anything else as attribute.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

export function $(selector, root = document) {
  return root.querySelector(selector);
}

/** Set visible text for screen readers (a polite live region). */
export function announce(text) {
  const region = document.getElementById("announcer");
  if (!region) return;
  region.textContent = "";
  // A new text node after a tick makes screen readers announce repeated messages too.
  window.setTimeout(() => {
    region.textContent = text;
  }, 30);
}

/** Put `text` on the clipboard (the Clipboard API; a hidden text area where it is unavailable). */
export async function copyText(text) {
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // permission refused: fall through
    }
  }
  const area = h("textarea", { class: "visually-hidden", readonly: true, "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  const done = document.execCommand("copy");
  area.remove();
  return done;
}

/** A button that copies `textOf()` and says so for a moment (and to screen readers). */
export function copyButton(textOf, { label, done, className = "link copy-button" }) {
  const button = h("button", { type: "button", class: className }, label);
  button.addEventListener("click", async () => {
    const copied = await copyText(textOf());
    if (!copied) return;
    button.textContent = done;
    button.dataset.copied = "true";
    announce(done);
    window.setTimeout(() => {
      button.textContent = label;
      delete button.dataset.copied;
    }, 1500);
  });
  return button;
}
