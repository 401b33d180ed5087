// A minimal DOM, EventSource and fetch for testing the dashboard's
// syscall/js layer under Node (go_js_wasm_exec), which has none of them.
// Only what the dashboard uses is implemented. Evaluating it again resets
// the page.
"use strict";
(() => {
  class Node {
    constructor(doc) { this.ownerDocument = doc; this.parentNode = null; this.childNodes = []; }
    appendChild(c) {
      if (c.parentNode) c.parentNode.removeChild(c);
      c.parentNode = this; this.childNodes.push(c); return c;
    }
    removeChild(c) {
      const i = this.childNodes.indexOf(c);
      if (i < 0) throw new Error("removeChild: not a child");
      this.childNodes.splice(i, 1); c.parentNode = null; return c;
    }
    replaceChildren(...kids) {
      for (const c of this.childNodes) c.parentNode = null;
      this.childNodes = [];
      for (const k of kids) this.appendChild(k);
    }
    get textContent() { return this.childNodes.map((c) => c.textContent).join(""); }
    set textContent(v) { this.replaceChildren(new Text(this.ownerDocument, String(v))); }
  }
  class Text extends Node {
    constructor(doc, data) { super(doc); this.data = data; }
    get textContent() { return this.data; }
    set textContent(v) { this.data = String(v); }
  }
  class Element extends Node {
    constructor(doc, ns, tag) {
      super(doc); this.namespaceURI = ns; this.tagName = tag.toUpperCase();
      this.attrs = new Map(); this.listeners = {}; this.value = ""; this.disabled = false; this.hidden = false;
    }
    get children() { return this.childNodes.filter((c) => c instanceof Element); }
    get id() { return this.getAttribute("id") || ""; }
    setAttribute(n, v) { this.attrs.set(n, String(v)); }
    getAttribute(n) { return this.attrs.has(n) ? this.attrs.get(n) : null; }
    hasAttribute(n) { return this.attrs.has(n); }
    removeAttribute(n) { this.attrs.delete(n); }
    addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
    // dispatch bubbles ev from this element up to the body.
    dispatch(type, ev = {}) {
      ev.type = type; ev.target = this; ev.defaultPrevented = false; ev.preventDefault = () => { ev.defaultPrevented = true; };
      for (let n = this; n instanceof Element; n = n.parentNode) {
        for (const fn of n.listeners[type] || []) fn(ev);
      }
      return ev;
    }
    click() { if (!this.disabled) this.dispatch("click"); }
    // all returns the descendants matching pred, in document order.
    all(pred) {
      const out = [];
      const walk = (n) => { for (const c of n.children) { if (pred(c)) out.push(c); walk(c); } };
      walk(this);
      return out;
    }
  }
  class Document {
    constructor() {
      this.body = new Element(this, "", "body");
      const app = this.createElement("div");
      app.setAttribute("id", "app");
      this.body.appendChild(app);
    }
    createElement(tag) { return new Element(this, "http://www.w3.org/1999/xhtml", tag); }
    createElementNS(ns, tag) { return new Element(this, ns, tag); }
    createTextNode(s) { return new Text(this, s); }
    getElementById(id) { return this.body.all((e) => e.id === id)[0] || null; }
  }
  globalThis.document = new Document();

  // EventSource: every instance is kept in __eventSources; tests drive them.
  globalThis.__eventSources = [];
  globalThis.EventSource = class {
    constructor(url) {
      this.url = url; this.readyState = 0; this.listeners = {};
      globalThis.__eventSources.push(this);
    }
    addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
    close() { this.readyState = 2; }
    emit(type, data) {
      this.readyState = 1;
      for (const fn of this.listeners[type] || []) fn({ type, data });
    }
    fail(closed) {
      this.readyState = closed ? 2 : 0;
      for (const fn of this.listeners.error || []) fn({ type: "error" });
    }
  };

  // fetch answers from __routes (url, or "METHOD url" for other methods
  // than GET → {status, body}), logs __fetched (urls) and __requests
  // ({url, method, headers, body}).
  globalThis.__routes = {};
  globalThis.__fetched = [];
  globalThis.__requests = [];
  globalThis.fetch = (url, opts = {}) => {
    globalThis.__fetched.push(url);
    const method = opts.method || "GET";
    globalThis.__requests.push({ url, method, headers: { ...(opts.headers || {}) }, body: opts.body });
    const r = globalThis.__routes[method === "GET" ? url : method + " " + url];
    if (r === undefined) return Promise.reject(new TypeError("network error"));
    return Promise.resolve({ status: r.status, text: () => Promise.resolve(r.body) });
  };

  // confirm and prompt answer from the queue __answers (confirm: false,
  // prompt: null when it is empty) and log their questions in __dialogs.
  globalThis.__answers = [];
  globalThis.__dialogs = [];
  globalThis.confirm = (msg) => {
    globalThis.__dialogs.push("confirm: " + msg);
    return globalThis.__answers.length ? globalThis.__answers.shift() : false;
  };
  globalThis.prompt = (msg) => {
    globalThis.__dialogs.push("prompt: " + msg);
    return globalThis.__answers.length ? globalThis.__answers.shift() : null;
  };

  // sessionStorage and localStorage: fresh, empty ones.
  const storage = () => {
    const m = new Map();
    return {
      getItem: (k) => (m.has(k) ? m.get(k) : null),
      setItem: (k, v) => { m.set(k, String(v)); },
      removeItem: (k) => { m.delete(k); },
      get length() { return m.size; },
    };
  };
  for (const name of ["sessionStorage", "localStorage"]) {
    Object.defineProperty(globalThis, name, { value: storage(), configurable: true, writable: true });
  }
})();
