import Foundation
import Hummingbird

/// `GET /dashboard` and `GET /dashboard/<asset>`: the web dashboard's static files; `GET /` redirects to it.
///
/// Served without a key on purpose: the files hold no data. Every number the page shows comes from the
/// `/v1` API with the key the user types into the page, so there is no second code path for figures.
struct DashboardRoutes {
    let assets: DashboardAssets

    func register(on router: Router<LedgerRequestContext>) {
        let assets = self.assets
        // A browser pointed at the server's address lands on the dashboard rather than a 404.
        router.get("/") { _, _ in Response(status: .found, headers: [.location: "/dashboard"]) }
        router.get("dashboard") { _, _ in try assets.response(for: "index.html") }
        router.get("dashboard/:asset") { _, context in
            try assets.response(for: context.parameters.get("asset") ?? "")
        }
    }
}

/// The files of `Resources/dashboard`, read once at start-up and answered from memory.
///
/// Requests are looked up by exact file name in a dictionary, never joined to a path, so no request can
/// reach a file outside the folder; a name that is not there is the API's JSON 404.
struct DashboardAssets: Sendable {
    struct Asset: Sendable {
        let contentType: String
        let bytes: ByteBuffer
    }

    let files: [String: Asset]

    /// Only these extensions are served; anything else in the folder stays private.
    static let contentTypes: [String: String] = [
        "html": "text/html; charset=utf-8",
        "js": "text/javascript; charset=utf-8",
        "css": "text/css; charset=utf-8",
        "svg": "image/svg+xml",
        "png": "image/png",
    ]

    /// Same origin only: no inline script or style, no CDN, no framing, and forms never submit (the key
    /// form is handled by script, so a failing script cannot put the key into a URL).
    static let contentSecurityPolicy =
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        + "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    static func load() throws -> DashboardAssets {
        guard let folder = Bundle.module.url(forResource: "dashboard", withExtension: nil) else {
            return DashboardAssets(files: [:])
        }
        var files: [String: Asset] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) {
            let ext = (name as NSString).pathExtension.lowercased()
            guard let type = contentTypes[ext] else { continue }
            let data = try Data(contentsOf: folder.appendingPathComponent(name))
            files[name] = Asset(contentType: type, bytes: ByteBuffer(bytes: Array(data)))
        }
        return DashboardAssets(files: files)
    }

    func response(for name: String) throws -> Response {
        guard let asset = files[name] else { throw APIError.notFound("no such dashboard file") }
        return Response(
            status: .ok,
            headers: [
                .contentType: asset.contentType,
                .cacheControl: "no-cache",
                .contentSecurityPolicy: Self.contentSecurityPolicy,
                .xContentTypeOptions: "nosniff",
                .init("Referrer-Policy")!: "no-referrer",
            ],
            body: .init(byteBuffer: asset.bytes))
    }
}
