import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import NIOCore
import Testing

@Suite("The web dashboard's static files")
struct DashboardTests {
    @Test("/dashboard is the page, served without a key, uncached, under a same-origin-only CSP")
    func index() async throws {
        try await APIHarness.run { http, api in
            let response = try await http.execute(uri: "/dashboard", method: .get, headers: api.headers(nil))
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "text/html; charset=utf-8")
            #expect(response.headers[.cacheControl] == "no-cache")
            #expect(response.headers[.xContentTypeOptions] == "nosniff")
            let csp = response.headers[.contentSecurityPolicy] ?? ""
            #expect(csp.contains("default-src 'self'"))
            #expect(!csp.contains("unsafe-inline") && !csp.contains("http"))
            let html = String(buffer: response.body)
            #expect(html.contains("<script type=\"module\" src=\"/dashboard/app.js\"></script>"))
            // The CSP forbids inline code and style: the page must not need them.
            #expect(!html.contains("<script>") && !html.contains(" style=") && !html.contains(" onclick="))
        }
    }

    @Test("/ redirects to /dashboard, without a key")
    func root() async throws {
        try await APIHarness.run { http, api in
            let response = try await http.execute(uri: "/", method: .get, headers: api.headers(nil))
            #expect(response.status == .found)
            #expect(response.headers[.location] == "/dashboard")
        }
    }

    @Test("every asset, and every module the scripts import, is served with its content type")
    func assets() async throws {
        try await APIHarness.run { http, api in
            let expected = [
                "app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8",
                "favicon.svg": "image/svg+xml", "index.html": "text/html; charset=utf-8",
            ]
            for (name, type) in expected {
                let response = try await http.execute(uri: "/dashboard/\(name)", method: .get, headers: api.headers(nil))
                #expect(response.status == .ok, "\(name)")
                #expect(response.headers[.contentType] == type, "\(name)")
                #expect(response.headers[.cacheControl] == "no-cache", "\(name)")
                #expect(response.headers[.contentSecurityPolicy] != nil, "\(name)")
            }
            var pending = ["app.js"]
            var seen: Set<String> = []
            while let name = pending.popLast() {
                guard seen.insert(name).inserted else { continue }
                let response = try await http.execute(uri: "/dashboard/\(name)", method: .get, headers: api.headers(nil))
                #expect(response.status == .ok, "\(name) is imported but not served")
                #expect(response.headers[.contentType] == "text/javascript; charset=utf-8", "\(name)")
                pending += Self.imports(String(buffer: response.body))
            }
            #expect(seen.count > 5, "the module graph from app.js: \(seen.sorted())")
        }
    }

    @Test("an unknown asset is the API's JSON 404, and nothing outside the folder is reachable")
    func unknown() async throws {
        try await APIHarness.run { http, api in
            for uri in [
                "/dashboard/nope.js", "/dashboard/..%2F..%2FPackage.swift", "/dashboard/%2e%2e", "/dashboard/app.js/x", "/dashboard/.DS_Store",
            ] {
                let response = try await http.execute(uri: uri, method: .get, headers: api.headers(nil))
                #expect(response.status == .notFound, "\(uri)")
                #expect(response.headers[.contentType] == "application/json; charset=utf-8", "\(uri)")
                #expect(response.errorCode == "not_found", "\(uri)")
            }
        }
    }

    /// The `./name.js` modules a script imports.
    static func imports(_ source: String) -> [String] {
        source.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("import "), let from = line.range(of: "from \"./") else { return nil }
            let rest = line[from.upperBound...]
            return rest.firstIndex(of: "\"").map { String(rest[..<$0]) }
        }
    }
}
