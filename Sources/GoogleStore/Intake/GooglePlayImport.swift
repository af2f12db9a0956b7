import Foundation
import LedgerCore
import LedgerStore
import StoreAdapters

/// One purchase of a `subledger google import` file (docs/google.md): a purchase token, or a Google Play
/// order id resolved to its token with `orders.get`; the product and subscriber when the file says them.
public struct GoogleImportLine: Sendable, Equatable {
    /// The line's number in the file (1 is the first line, a header included).
    public var line: Int
    public var purchaseToken: String?
    public var orderID: String?
    public var productID: String?
    public var subscriberID: String?
    public var packageName: String?

    public init(
        line: Int, purchaseToken: String? = nil, orderID: String? = nil, productID: String? = nil, subscriberID: String? = nil,
        packageName: String? = nil
    ) {
        (self.line, self.purchaseToken, self.orderID, self.productID, self.subscriberID, self.packageName) =
            (line, purchaseToken, orderID, productID, subscriberID, packageName)
    }
}

/// The file `subledger google import` reads: one purchase token or order id (`GPA.…`) a line, or CSV whose
/// header names the columns (`purchase_token` and/or `order_id`; `product_id`, `subscriber_id`,
/// `package_name` optional; others ignored). Blank lines and lines starting with `#` are skipped.
public enum GoogleImportFile {
    /// A line that cannot be read: its number and why.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var line: Int
        public var reason: String
        public var description: String { "line \(line): \(reason)" }
    }

    /// Longest file read (docs/limits.md).
    public static let maxBytes = 64 << 20
    public static let columns = ["purchase_token", "order_id", "product_id", "subscriber_id", "package_name"]

    /// Each purchase line, or the problem with it, in file order.
    public static func parse(_ text: String) -> [Result<GoogleImportLine, Problem>] {
        var out: [Result<GoogleImportLine, Problem>] = []
        var header: [String: Int]?
        var first = true
        for (i, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = i + 1
            let line = raw.hasSuffix("\r") ? raw.dropLast() : raw
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { continue }
            let cells = trimmed.split(separator: ",", omittingEmptySubsequences: false).map { cell -> String in
                var c = cell.trimmingCharacters(in: .whitespaces)
                if c.count >= 2, c.hasPrefix("\""), c.hasSuffix("\"") { c = String(c.dropFirst().dropLast()) }
                return c
            }
            if first {
                first = false
                let names = cells.map { $0.lowercased() }
                if names.contains("purchase_token") || names.contains("order_id") {
                    header = Dictionary(names.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
                    continue
                }
            }
            guard let header else {
                guard cells.count == 1 else {
                    out.append(
                        .failure(
                            Problem(
                                line: number,
                                reason: "a file without a header holds one purchase token or order id a line; name the columns in a header line "
                                    + "(purchase_token,order_id,product_id,subscriber_id)")))
                    continue
                }
                let value = cells[0]
                out.append(
                    check(
                        GoogleImportLine(
                            line: number, purchaseToken: value.hasPrefix("GPA.") ? nil : value, orderID: value.hasPrefix("GPA.") ? value : nil)))
                continue
            }
            func cell(_ name: String) -> String? {
                guard let j = header[name], j < cells.count, !cells[j].isEmpty else { return nil }
                return cells[j]
            }
            out.append(
                check(
                    GoogleImportLine(
                        line: number, purchaseToken: cell("purchase_token"), orderID: cell("order_id"), productID: cell("product_id"),
                        subscriberID: cell("subscriber_id"), packageName: cell("package_name"))))
        }
        return out
    }

    /// Every value within its bounds, naming the column that is not.
    static func check(_ l: GoogleImportLine) -> Result<GoogleImportLine, Problem> {
        func fail(_ reason: String) -> Result<GoogleImportLine, Problem> { .failure(Problem(line: l.line, reason: reason)) }
        func plain(_ s: String, max: Int) -> Bool { s.utf8.count <= max && s.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7f } }
        guard l.purchaseToken != nil || l.orderID != nil else { return fail("purchase_token or order_id is required") }
        if let t = l.purchaseToken, !plain(t, max: GoogleNotification.maxTokenBytes) {
            return fail("purchase_token must be 1–\(GoogleNotification.maxTokenBytes) printable ASCII characters")
        }
        if let o = l.orderID, !o.hasPrefix("GPA.") || !plain(o, max: GoogleNotification.maxIdentifierBytes) {
            return fail("order_id must be a Google Play order id (GPA.…, at most \(GoogleNotification.maxIdentifierBytes) characters)")
        }
        for (name, value) in [("product_id", l.productID), ("package_name", l.packageName)] {
            if let value, !plain(value, max: GoogleNotification.maxIdentifierBytes) {
                return fail("\(name) must be 1–\(GoogleNotification.maxIdentifierBytes) printable ASCII characters")
            }
        }
        if let s = l.subscriberID, !Identifiers.isValidSubscriberID(s) { return fail("subscriber_id \(Identifiers.subscriberIDRule)") }
        return .success(l)
    }
}

extension GooglePlay {
    /// Why one line of an import cannot be recorded (Google does not know it, no subscriber is named…);
    /// Google being unreachable is not one of these: the import stops, and a re-run goes on.
    public struct ImportRefusal: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// One purchase of an import, recorded as `POST /v1/stores/google/purchases` records a submitted one
    /// (`submit`: verified with `subscriptionsv2.get`, else `products.get`; claimed, linked and appended in
    /// one transaction; keys from Google's order ids, so a re-import appends nothing). An order id is first
    /// resolved with `orders.get` (its `purchaseToken` and line item's `productId`). Without a
    /// `subscriber_id`, the subscriber is the purchase's `obfuscatedExternalAccountId`, else the one its
    /// token (or the token it replaced) is already linked to.
    public func importPurchase(_ l: GoogleImportLine, package: String) async throws -> (subscriber: String, events: [RecordedEvent]) {
        guard let api else { throw GooglePlayError.configuration("Google Play is not configured (--google-service-account-file)") }
        do {
            let (subscriber, product, token) = try await identify(l, package: package, api: api)
            return (subscriber, try await submit(subscriber: subscriber, package: package, productID: product, token: token))
        } catch GooglePlayError.refused(let status, let message) {
            throw ImportRefusal("Google refused it: HTTP \(status): \(message)")
        } catch let error as StoreMappingError {
            throw ImportRefusal("\(error.field) \(error.reason)")
        } catch let error as IdentityError {
            throw ImportRefusal(error.description)
        } catch let error as EventValidationError {
            throw ImportRefusal(error.description)
        }
    }

    /// The line's subscriber, product and purchase token, from the line and Google's state.
    func identify(_ l: GoogleImportLine, package: String, api: GooglePlayAPI) async throws -> (String, String, String) {
        var token = l.purchaseToken
        var product = l.productID
        if let orderID = l.orderID {
            let order = try await api.order(package: package, orderID: orderID)
            guard let t = order["purchaseToken"]?.stringValue, !t.isEmpty else { throw ImportRefusal("orders.get \(orderID) names no purchaseToken") }
            if let token, token != t { throw ImportRefusal("order \(orderID) is of another purchase token than the line's") }
            token = t
            product = product ?? order["lineItems"]?.arrayValue?.first?.objectValue?["productId"]?.stringValue
        }
        guard let token else { throw ImportRefusal("purchase_token or order_id is required") }
        var subscriber = l.subscriberID
        if subscriber == nil || product == nil {
            var hint: String?
            var linked: String?
            do {
                let state = try await api.subscription(package: package, token: token)
                product = product ?? state["lineItems"]?.arrayValue?.first?.objectValue?["productId"]?.stringValue
                hint = state["externalAccountIdentifiers"]?.objectValue?["obfuscatedExternalAccountId"]?.stringValue
                linked = state["linkedPurchaseToken"]?.stringValue
            } catch GooglePlayError.refused(let status, _) where status == 404 || status == 410 {
                guard let product else {
                    throw ImportRefusal(
                        "not a subscription's purchase token (subscriptionsv2.get: HTTP \(status)); name the product_id of a one-time product")
                }
                hint = try await api.product(package: package, productID: product, token: token)["obfuscatedExternalAccountId"]?.stringValue
            }
            if subscriber == nil, let hint, Identifiers.isValidSubscriberID(hint) { subscriber = hint }
            for account in [token, linked].compactMap({ $0 }) where subscriber == nil {
                subscriber = try await intake.links.subscriber(store: Self.store, accountID: account)
            }
        }
        guard let product else { throw ImportRefusal("the purchase names no product: give product_id") }
        guard let subscriber else {
            throw ImportRefusal("no subscriber: the purchase has no obfuscatedExternalAccountId and its token is not linked; give subscriber_id")
        }
        return (subscriber, product, token)
    }
}
