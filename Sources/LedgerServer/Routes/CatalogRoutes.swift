import Hummingbird
import LedgerCore
import LedgerStore

/// `PUT /v1/catalog/products/{product_id}`, `GET /v1/catalog/products[/{product_id}]` (admin).
struct CatalogRoutes {
    let catalog: CatalogStore
    let maxBodyBytes: Int

    func register(on group: RouterGroup<LedgerRequestContext>) {
        group.put("catalog/products/:product_id", use: put)
        group.get("catalog/products", use: cancelledOnDisconnect(list))
        group.get("catalog/products/:product_id", use: cancelledOnDisconnect(history))
    }

    @Sendable func put(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try productID(context)
        let body = try await RequestBody.collect(request, limit: maxBodyBytes)
        let value: JSONValue
        do {
            value = try JSONParser.parse(body.readableBytesView)
        } catch {
            throw APIError.invalidRequest("the body is not valid JSON: \(error)")
        }
        let product: Product
        do {
            product = try Product.decode(productID: id, value)
        } catch {
            throw APIError.invalidEvent(error)
        }
        let stored = try await catalog.put(product)
        return .json(stored.json)
    }

    @Sendable func list(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        return .json(.object(["products": .array(try await catalog.list().map(\.json))]))
    }

    @Sendable func history(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        try context.require(.manage)
        let id = try productID(context)
        let revisions = try await catalog.history(id)
        guard let latest = revisions.last else { throw APIError.notFound("no product \"\(id)\" in the catalog") }
        return .json(.object(["product": latest.json, "revisions": .array(revisions.map(\.json))]))
    }

    /// The `{product_id}` path parameter, percent-decoded and held to the identifier rule (400 otherwise).
    private func productID(_ context: LedgerRequestContext) throws -> String {
        let raw = context.parameters.get("product_id") ?? ""
        let id = raw.percentDecoded
        if let problem = Identifiers.problem(id) {
            throw APIError.invalidRequest("path parameter 'product_id' \(problem)")
        }
        return id
    }
}
