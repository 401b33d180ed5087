// Starts the Go WebAssembly dashboard (main.wasm) with the toolchain's
// wasm_exec.js. Kept outside index.html so the page's CSP needs no
// 'unsafe-inline'; the server may send main.wasm gzip-encoded.
"use strict";
(async () => {
  const go = new Go();
  try {
    let result;
    try {
      result = await WebAssembly.instantiateStreaming(fetch("main.wasm"), go.importObject);
    } catch (streamingErr) {
      // A server without the application/wasm type: compile from bytes.
      const resp = await fetch("main.wasm");
      if (!resp.ok) throw new Error("main.wasm: HTTP " + resp.status);
      result = await WebAssembly.instantiate(await resp.arrayBuffer(), go.importObject);
    }
    await go.run(result.instance);
  } catch (err) {
    const app = document.getElementById("app");
    app.setAttribute("aria-busy", "false");
    app.textContent = "The dashboard failed to start: " + err;
    console.error(err);
  }
})();
