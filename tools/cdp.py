"""A headless Chromium driven over the Chrome DevTools Protocol, standard library only: a minimal RFC 6455
websocket client (socket + base64 + hashlib) and the few CDP calls the browser test needs. Used by
tools/browser_test.py."""
import base64, hashlib, json, os, shutil, socket, struct, subprocess, tempfile, time

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WebSocket:
    """Client side of RFC 6455: text frames out (masked), text/binary frames in, pings answered."""

    def __init__(self, host, port, path, timeout=60):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk: raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        head, rest = head.split(b"\r\n\r\n", 1)
        self.buffer = bytearray(rest)
        lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in lines[0] + " ": raise ConnectionError(f"websocket handshake refused: {lines[0]}")
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
        expected = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if headers.get("sec-websocket-accept") != expected: raise ConnectionError("websocket handshake: bad Sec-WebSocket-Accept")

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk: raise ConnectionError("websocket closed")
            self.buffer += chunk
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def _frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126: head += bytes([0x80 | n])
        elif n < 65536: head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else: head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text):
        self._frame(0x1, text.encode())

    def recv(self):
        """The next whole message (fragments joined), as text."""
        parts = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126: n = struct.unpack(">H", self._read(2))[0]
            elif n == 127: n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask: payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x9: self._frame(0xA, payload); continue
            if opcode == 0xA: continue
            if opcode == 0x8: raise ConnectionError("websocket closed by the browser")
            parts.append(payload)
            if b0 & 0x80: return b"".join(parts).decode()

    def close(self):
        try: self._frame(0x8, b"")
        except OSError: pass
        self.sock.close()


class Browser:
    """One headless Chromium with one page (a flat CDP session); events are kept for the caller to inspect."""

    def __init__(self, binary, width=1366, height=768):
        self.profile = tempfile.mkdtemp(prefix="subledger-chromium-")
        args = [binary, "--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync", "--disable-component-update",
                "--disable-default-apps", "--mute-audio", "--hide-scrollbars", "--password-store=basic",
                "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "about:blank"]
        if os.geteuid() == 0: args.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        for _ in range(300):
            if os.path.exists(port_file) and len(open(port_file).read().split("\n")) >= 2: break
            if self.proc.poll() is not None: raise RuntimeError(f"chromium exited with status {self.proc.returncode}")
            time.sleep(0.1)
        else:
            raise RuntimeError("chromium did not open its DevTools port")
        port, path = open(port_file).read().split("\n")[:2]
        self.ws = WebSocket("127.0.0.1", int(port), path)
        self.next_id = 0
        self.events = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"): self.page(f"{domain}.enable")
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method, session=None, **params):
        self.next_id += 1
        mid = self.next_id
        message = {"id": mid, "method": method, "params": params}
        if session: message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == mid:
                if "error" in m: raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if "method" in m: self.events.append(m)

    def page(self, method, **params):
        return self.call(method, session=self.session, **params)

    def pump(self, seconds=0.05):
        """Collects events that arrived meanwhile (a cheap round trip)."""
        time.sleep(seconds)
        self.page("Runtime.evaluate", expression="0")

    def eval(self, expression, await_promise=True):
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(f"evaluating {expression[:80]!r}: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def wait(self, expression, timeout=30, what=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                value = self.eval(expression)
            except RuntimeError:  # the page is navigating (a reload): its context is gone for a moment
                value = None
            if value: return value
            time.sleep(0.1)
        raise TimeoutError(f"timed out waiting for {what or expression}")

    def navigate(self, url):
        self.page("Page.navigate", url=url)
        self.wait("document.readyState === 'complete'", what=f"{url} to load")

    def type_into(self, selector, text):
        """Focuses an input and types into it as a user would (Input.insertText)."""
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.page("Input.insertText", text=text)

    def key(self, key, code=None, vk=0, text=None):
        params = dict(key=key, code=code or key, windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)
        self.page("Input.dispatchKeyEvent", type="keyDown", **params, **({"text": text} if text else {}))
        self.page("Input.dispatchKeyEvent", type="keyUp", **params)

    def click(self, selector):
        """A real mouse click in the middle of the element."""
        box = self.eval(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); el.scrollIntoView({{block: 'center'}}); "
                        "const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path, full=False):
        params = {"format": "png"}
        if full:
            w, h = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})
        else:
            self.eval("window.scrollTo(0, 0)")
        data = self.page("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f: f.write(base64.b64decode(data))

    def close(self):
        try: self.call("Browser.close")
        except (OSError, RuntimeError, ConnectionError): pass
        try: self.ws.close()
        except OSError: pass
        try: self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
