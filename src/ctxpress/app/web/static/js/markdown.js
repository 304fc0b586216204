// A reply's Markdown. The service renders complete messages with markdown-it-py and sanitises the
// HTML with nh3 (an allow-list of tags, attributes and link schemes): that HTML is inserted as is.
// The page parses no Markdown itself; while a reply streams it is plain text.

import { copyButton, h } from "./dom.js";
import { t } from "./i18n.js";

/** Show `text` in `body`: the service's sanitised `html` when given, plain text otherwise. */
export function showMarkdown(body, text, html) {
  body.dataset.raw = text;
  if (html === null || html === undefined) {
    body.classList.remove("markdown");
    body.textContent = text;
    return;
  }
  body.classList.add("markdown");
  body.innerHTML = html; // sanitised by the service (server/rendering.py)
  for (const pre of body.querySelectorAll("pre")) addCodeCopy(pre);
}

/** A code block gets a copy button for its code (the text as written, without the button). */
function addCodeCopy(pre) {
  const code = pre.querySelector("code") || pre;
  const language = /language-([\w+#.-]+)/.exec(code.className || "")?.[1] || "";
  const head = h(
    "div",
    { class: "code-head" },
    h("span", { class: "code-language" }, language),
    copyButton(() => code.textContent, { label: t("copyCode"), done: t("copied"), className: "link copy-code" }),
  );
  const block = h("div", { class: "code-block" });
  pre.replaceWith(block);
  block.append(head, pre);
}
