import AppleStore
import LedgerCore
import StoreAdapters
import Testing

/// verifyReceipt responses as Apple writes them: every value a string, dates three times over.
private enum Receipt {
    static let chain = "1000000800000001"
    static let monthly = "com.example.pro.monthly"

    /// A date as `(Etc/GMT text, milliseconds)`.
    typealias Moment = (gmt: String, ms: String)
    static let jan01: Moment = ("2024-01-01 10:00:00", "1704103200000")
    static let jan08: Moment = ("2024-01-08 10:00:00", "1704708000000")
    static let feb08: Moment = ("2024-02-08 10:00:00", "1707386400000")
    static let mar08: Moment = ("2024-03-08 10:00:00", "1709892000000")
    static let apr08: Moment = ("2024-04-08 10:00:00", "1712570400000")
    static let mar20: Moment = ("2024-03-20 15:30:00", "1710948600000")
    static let apr24: Moment = ("2024-04-24 10:00:00", "1713952800000")

    static func transaction(
        _ id: String, original: String = chain, product: String = monthly, purchased: Moment, expires: Moment?,
        trial: Bool = false, extra: String = ""
    ) -> String {
        var fields = [
            #""quantity": "1""#,
            #""product_id": "\#(product)""#,
            #""transaction_id": "\#(id)""#,
            #""original_transaction_id": "\#(original)""#,
            #""purchase_date": "\#(purchased.gmt) Etc/GMT""#,
            #""purchase_date_ms": "\#(purchased.ms)""#,
            #""purchase_date_pst": "\#(purchased.gmt) America/Los_Angeles""#,
            #""original_purchase_date": "\#(jan01.gmt) Etc/GMT""#,
            #""original_purchase_date_ms": "\#(jan01.ms)""#,
            #""web_order_line_item_id": "2\#(id.dropFirst())""#,
            #""is_trial_period": "\#(trial)""#,
            #""in_app_ownership_type": "PURCHASED""#,
        ]
        if let expires {
            fields += [
                #""expires_date": "\#(expires.gmt) Etc/GMT""#,
                #""expires_date_ms": "\#(expires.ms)""#,
                #""is_in_intro_offer_period": "false""#,
                #""subscription_group_identifier": "20500001""#,
            ]
        }
        if !extra.isEmpty { fields.append(extra) }
        return "{" + fields.joined(separator: ", ") + "}"
    }

    static let trial = transaction("1000000800000001", purchased: jan01, expires: jan08, trial: true)
    static let renewal1 = transaction("1000000810000002", purchased: jan08, expires: feb08)
    static let renewal2 = transaction("1000000810000003", purchased: feb08, expires: mar08)
    static func renewal3(_ extra: String = "") -> String {
        transaction("1000000810000004", purchased: mar08, expires: apr08, extra: extra)
    }

    static func pending(_ extra: String) -> String {
        #"{"auto_renew_product_id": "\#(monthly)", "product_id": "\#(monthly)", "original_transaction_id": "\#(chain)", \#(extra)}"#
    }

    static let autoRenewOn = pending(#""auto_renew_status": "1""#)

    /// A monthly subscription that began with a one-week free trial and renewed three times;
    /// `latest_receipt_info` is out of purchase order, as Apple sends it.
    static func modern(
        environment: String = "Production", lastRenewal: String = "", pending: String? = autoRenewOn,
        order: [Int] = [2, 0, 3, 1]
    ) -> String {
        let history = [trial, renewal1, renewal2, renewal3(lastRenewal)]
        return """
            {
              "status": 0,
              "environment": "\(environment)",
              "subscriber_id": "user-42",
              "receipt": {
                "receipt_type": "Production", "adam_id": 1234567890, "bundle_id": "com.example.app",
                "application_version": "42", "receipt_creation_date_ms": "1709892005000",
                "request_date_ms": "1710000000000", "original_application_version": "1.0",
                "in_app": [\(trial), \(renewal1)]
              },
              "latest_receipt_info": [\(order.map { history[$0] }.joined(separator: ", "))],
              "latest_receipt": "MIIUGAYJKoZIhvcNAQcCoIIUCTCCFAUCAQExCzAJBgUrDgMCGgUAMIIDuQYJKoZIhvcNAQcBoIIDqgSCA6Yx",
              "pending_renewal_info": [\(pending ?? "")]
            }
            """
    }

    /// An iOS 6 style response: `receipt` is the first transaction and `latest_receipt_info` the latest one,
    /// dates as `Etc/GMT` text and `expires_date` as milliseconds in a string.
    static func oldShape(status: Int = 0, latestKey: String = "latest_receipt_info", receiptExtra: String = "", latestExpires: String? = nil)
        -> String
    {
        let expires = latestExpires ?? #""expires_date": "1327869007000", "expires_date_formatted": "2012-01-29 20:30:07 Etc/GMT""#
        return """
            {
              "status": \(status),
              "receipt": {
                "original_purchase_date_pst": "2011-10-29 13:30:07 America/Los_Angeles",
                "unique_identifier": "0000b01147b8", "original_transaction_id": "1000000000000001",
                "expires_date": "1322598607000", "transaction_id": "1000000000000001", "quantity": "1",
                "product_id": "com.example.pro.monthly", "item_id": "471234567", "bid": "com.example.app",
                "web_order_line_item_id": "1000000000000010", "bvrs": "1.0",
                "expires_date_formatted": "2011-11-29 20:30:07 Etc/GMT",
                "purchase_date": "2011-10-29 20:30:07 Etc/GMT",
                "purchase_date_pst": "2011-10-29 13:30:07 America/Los_Angeles",
                "original_purchase_date": "2011-10-29 20:30:07 Etc/GMT"\(receiptExtra)
              },
              "\(latestKey)": {
                "original_purchase_date_pst": "2011-10-29 13:30:07 America/Los_Angeles",
                "original_transaction_id": "1000000000000001", "transaction_id": "1000000000000003",
                "quantity": "1", "product_id": "com.example.pro.monthly", "item_id": "471234567",
                "bid": "com.example.app", "web_order_line_item_id": "1000000000000012", "bvrs": "1.0",
                \(expires),
                "purchase_date": "2011-12-29 20:30:07 Etc/GMT",
                "purchase_date_pst": "2011-12-29 12:30:07 America/Los_Angeles",
                "original_purchase_date": "2011-10-29 20:30:07 Etc/GMT"
              },
              "latest_receipt": "ewoJInNpZ25hdHVyZSIgPSAiQXBNVUJDODZBbHpOaWtWNVl0clpBTWlKUWJLOEVk"
            }
            """
    }

    /// A modern response holding just `entries` in `latest_receipt_info`.
    static func modernWith(_ entries: [String], environment: String = "Production", pending: String = "") -> String {
        """
        {"status": 0, "environment": "\(environment)", "receipt": {"bundle_id": "com.example.app", "in_app": []},
         "latest_receipt_info": [\(entries.joined(separator: ", "))], "pending_renewal_info": [\(pending)]}
        """
    }
}

private func map(_ json: String) throws -> AppleReceiptMapping {
    try AppleReceiptMapper.recordedMap(try JSONParser.parse(json))
}

private func mappingError(_ json: String) throws -> AppleReceiptError? {
    let body = try JSONParser.parse(json)
    return #expect(throws: AppleReceiptError.self) { try AppleReceiptMapper.map(body) }
}

private func time(_ rfc3339: String) throws -> Timestamp { try Timestamp(rfc3339: rfc3339) }

/// What the HTTP edge adds from the catalog before appending.
private func completedFromCatalog(_ draft: EventDraft) -> [String: JSONValue] {
    var data = draft.data
    switch draft.type {
    case .purchase, .renewal:
        data["entitlements"] = ["pro"]
        data["price_minor"] = 999
        data["currency"] = "USD"
        if data["kind"] == nil {
            data["kind"] = "non_renewing"
            data["duration"] = "P1M"
        } else {
            data["period"] = "P1M"
        }
    case .refund:
        data["amount_minor"] = 999
        data["currency"] = "USD"
    default:
        data["entitlements"] = ["pro"]
    }
    return data
}

/// Every draft becomes a valid event once the catalog has filled it in (so the mapper emits only fields
/// the validator allows), and carries its raw store object.
private func expectCompletable(_ mapping: AppleReceiptMapping, sourceLocation: SourceLocation = #_sourceLocation) {
    for (i, draft) in mapping.drafts.enumerated() {
        do {
            try EventDataValidator.validate(
                type: draft.type, data: completedFromCatalog(draft), occurredAt: draft.occurredAt, path: "drafts[\(i)].data")
        } catch {
            Issue.record("\(draft.idempotencyKey): \(error)", sourceLocation: sourceLocation)
        }
        #expect(draft.environment == mapping.environment, sourceLocation: sourceLocation)
        #expect(draft.metadata["store"] == "apple", sourceLocation: sourceLocation)
        #expect(draft.metadata["origin"] == "verifyReceipt", sourceLocation: sourceLocation)
        #expect(draft.metadata["raw"]?.objectValue != nil, sourceLocation: sourceLocation)
        #expect(Set(draft.metadata.keys) == ["store", "raw", "origin"], sourceLocation: sourceLocation)
    }
}

@Suite struct ReceiptMapperTests {
    @Test func trialThenRenewalsComeOutInPurchaseOrder() throws {
        let m = try map(Receipt.modern())
        expectCompletable(m)
        #expect(m.environment == .production)
        #expect(m.originalTransactionIDs == [Receipt.chain])
        #expect(m.drafts.map(\.type) == [.purchase, .renewal, .renewal, .renewal, .autoRenewChanged])
        #expect(
            m.drafts.map(\.idempotencyKey) == [
                "apple:txn:1000000800000001", "apple:txn:1000000810000002", "apple:txn:1000000810000003",
                "apple:txn:1000000810000004", "apple:auto_renew:1000000800000001:1:1000000810000004",
            ])
        #expect(
            m.drafts.map(\.occurredAt) == [
                try time("2024-01-01T10:00:00Z"), try time("2024-01-08T10:00:00Z"), try time("2024-02-08T10:00:00Z"),
                try time("2024-03-08T10:00:00Z"), try time("2024-03-08T10:00:00Z"),
            ])
        #expect(m.drafts.map { $0.data["offer"] } == ["trial", "none", "none", "none", nil])

        let first = m.drafts[0]
        #expect(first.productID == Receipt.monthly)
        #expect(first.originalTransactionID == Receipt.chain)
        #expect(
            first.data == [
                "product_id": "com.example.pro.monthly", "transaction_id": "1000000800000001",
                "original_transaction_id": "1000000800000001", "kind": "auto_renewable",
                "period_start": "2024-01-01T10:00:00Z", "period_end": "2024-01-08T10:00:00Z", "offer": "trial",
            ])
        #expect(first.metadata["raw"]?.objectValue?["web_order_line_item_id"] == "2000000800000001")
        #expect(m.drafts[3].data["period_start"] == "2024-03-08T10:00:00Z")
        #expect(m.drafts[3].data["period_end"] == "2024-04-08T10:00:00Z")
        #expect(m.drafts[3].originalTransactionID == Receipt.chain)
        #expect(m.drafts[4].data == ["enabled": true, "product_id": "com.example.pro.monthly"])
    }

    @Test(arguments: [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]])
    func inputOrderDoesNotMatter(order: [Int]) throws {
        #expect(try map(Receipt.modern(order: order)) == map(Receipt.modern()))
    }

    @Test func cancellationAddsARefundForItsOwnTransactionOnly() throws {
        let m = try map(
            Receipt.modern(
                lastRenewal:
                    #""cancellation_date": "\#(Receipt.mar20.gmt) Etc/GMT", "cancellation_date_ms": "\#(Receipt.mar20.ms)", "cancellation_reason": "1""#
            ))
        expectCompletable(m)
        let refunds = m.drafts.filter { $0.type == .refund }
        #expect(refunds.count == 1)
        let refund = try #require(refunds.first)
        #expect(refund.occurredAt == (try time("2024-03-20T15:30:00Z")))
        #expect(refund.idempotencyKey == "apple:refund:1000000810000004")
        #expect(refund.productID == Receipt.monthly)
        #expect(refund.originalTransactionID == Receipt.chain)
        #expect(refund.data == ["transaction_id": "1000000810000004", "reason": "cancellation_reason_1"])
        #expect(m.drafts.last == refund)
        #expect(m.drafts.filter { $0.type == .renewal }.count == 3)
    }

    @Test func cancellationWithoutReasonIsAnAppleCancellation() throws {
        let m = try map(
            Receipt.modernWith([
                Receipt.transaction(
                    "1000000820000001", original: "1000000820000001", product: "com.example.coins.100", purchased: Receipt.jan01,
                    expires: nil, extra: #""cancellation_date_ms": "\#(Receipt.jan08.ms)""#)
            ]))
        expectCompletable(m)
        #expect(m.drafts.map(\.type) == [.purchase, .refund])
        #expect(m.drafts[1].data == ["transaction_id": "1000000820000001", "reason": "apple_cancellation"])
        #expect(m.drafts[1].occurredAt == (try time("2024-01-08T10:00:00Z")))
    }

    @Test func autoRenewTurnedOff() throws {
        let m = try map(Receipt.modern(pending: Receipt.pending(#""auto_renew_status": "0", "expiration_intent": "1""#)))
        expectCompletable(m)
        let change = try #require(m.drafts.last)
        #expect(change.type == .autoRenewChanged)
        #expect(change.data == ["enabled": false, "product_id": "com.example.pro.monthly"])
        #expect(change.occurredAt == (try time("2024-03-08T10:00:00Z")))
        #expect(change.idempotencyKey == "apple:auto_renew:1000000800000001:0:1000000810000004")
        #expect(change.originalTransactionID == Receipt.chain)
        #expect(change.metadata["raw"]?.objectValue?["expiration_intent"] == "1")
        #expect(m.drafts.filter { $0.type == .billingIssue }.isEmpty)
    }

    @Test func renewalProductFallsBackToAutoRenewProduct() throws {
        let pending =
            #"{"auto_renew_product_id": "com.example.pro.yearly", "original_transaction_id": "\#(Receipt.chain)", "auto_renew_status": "1"}"#
        let m = try map(Receipt.modern(pending: pending))
        #expect(m.drafts.last?.data["product_id"] == "com.example.pro.yearly")
        #expect(m.drafts.last?.productID == "com.example.pro.yearly")
    }

    @Test func gracePeriodBecomesABillingIssue() throws {
        let m = try map(
            Receipt.modern(
                pending: Receipt.pending(
                    #"""
                    "auto_renew_status": "1", "is_in_billing_retry_period": "1", "expiration_intent": "2",
                    "grace_period_expires_date": "\#(Receipt.apr24.gmt) Etc/GMT", "grace_period_expires_date_ms": "\#(Receipt.apr24.ms)"
                    """#)))
        expectCompletable(m)
        #expect(m.drafts.map(\.type) == [.purchase, .renewal, .renewal, .renewal, .autoRenewChanged, .billingIssue])
        let issue = try #require(m.drafts.last)
        #expect(issue.occurredAt == (try time("2024-04-08T10:00:00Z")))
        #expect(issue.data == ["product_id": "com.example.pro.monthly", "grace_until": "2024-04-24T10:00:00Z"])
        #expect(issue.idempotencyKey == "apple:billing:1000000800000001:1000000810000004")
        #expect(issue.productID == Receipt.monthly)
    }

    @Test func billingRetryWithoutGraceIsABillingIssueWithoutGrace() throws {
        let m = try map(Receipt.modern(pending: Receipt.pending(#""auto_renew_status": "1", "is_in_billing_retry_period": "1""#)))
        expectCompletable(m)
        let issue = try #require(m.drafts.last)
        #expect(issue.type == .billingIssue)
        #expect(issue.data == ["product_id": "com.example.pro.monthly"])
    }

    @Test func graceEndingByTheExpiryIsNoBillingIssue() throws {
        let m = try map(
            Receipt.modern(
                pending: Receipt.pending(
                    #""auto_renew_status": "1", "is_in_billing_retry_period": "1", "grace_period_expires_date_ms": "\#(Receipt.apr08.ms)""#)))
        #expect(m.drafts.filter { $0.type == .billingIssue }.isEmpty)
    }

    @Test func renewalInfoOfAnotherChainIsLeftOut() throws {
        let pending = #"{"product_id": "com.example.other", "original_transaction_id": "9999", "auto_renew_status": "0"}"#
        let m = try map(Receipt.modern(pending: pending))
        #expect(m.drafts.map(\.type) == [.purchase, .renewal, .renewal, .renewal])
    }

    @Test func oldShapeWithOneLatestReceiptInfoObject() throws {
        let m = try map(Receipt.oldShape())
        expectCompletable(m)
        #expect(m.environment == .production)
        #expect(m.originalTransactionIDs == ["1000000000000001"])
        #expect(m.drafts.map(\.type) == [.purchase, .renewal])
        #expect(
            m.drafts[0].data == [
                "product_id": "com.example.pro.monthly", "transaction_id": "1000000000000001",
                "original_transaction_id": "1000000000000001", "kind": "auto_renewable",
                "period_start": "2011-10-29T20:30:07Z", "period_end": "2011-11-29T20:30:07Z", "offer": "none",
            ])
        #expect(m.drafts[0].metadata["raw"]?.objectValue?["bid"] == "com.example.app")
        #expect(m.drafts[1].idempotencyKey == "apple:txn:1000000000000003")
        #expect(m.drafts[1].occurredAt == (try time("2011-12-29T20:30:07Z")))
        #expect(m.drafts[1].data["period_end"] == "2012-01-29T20:30:07Z")
    }

    @Test func oldShapeExpiredStillCarriesData() throws {
        let m = try map(
            Receipt.oldShape(
                status: 21006, latestKey: "latest_expired_receipt_info",
                latestExpires: #""expires_date_formatted": "2012-01-29 20:30:07 Etc/GMT""#))
        expectCompletable(m)
        #expect(m.drafts.map(\.type) == [.purchase, .renewal])
        #expect(m.drafts[1].data["period_end"] == "2012-01-29T20:30:07Z")
    }

    @Test func oldShapeSandboxAndRefund() throws {
        let m = try map(
            Receipt.oldShape(
                receiptExtra: #", "environment": "Sandbox", "cancellation_date": "2011-11-01 08:00:00 Etc/GMT""#))
        expectCompletable(m)
        #expect(m.environment == .sandbox)
        #expect(m.drafts.map(\.type) == [.purchase, .refund, .renewal])
        #expect(m.drafts[1].occurredAt == (try time("2011-11-01T08:00:00Z")))
        #expect(m.drafts[1].data["reason"] == "apple_cancellation")
    }

    @Test func oldShapeMissingPurchaseDateNamesIt() throws {
        let json = Receipt.oldShape().replacing(
            #""purchase_date": "2011-10-29 20:30:07 Etc/GMT","#, with: "")
        let error = try mappingError(json)
        #expect(error?.field == "receipt.purchase_date")
        #expect(error?.reason.contains("America/Los_Angeles") == true)
    }

    @Test func sandboxReceiptSentToProduction() throws {
        let error = try mappingError(#"{"status": 21007}"#)
        #expect(error?.field == "status")
        #expect(error?.reason.contains("21007") == true)
        #expect(error?.reason.contains("sandbox receipt sent to production") == true)
        #expect(error?.description.hasPrefix("status: ") == true)
    }

    @Test(arguments: [
        (21000, "malformed request"), (21002, "malformed receipt data"), (21003, "could not be authenticated"),
        (21004, "shared secret mismatch"), (21005, "unavailable"), (21008, "production receipt sent to sandbox"),
        (21009, "internal data access error"), (21010, "account not found"), (21150, "internal data access error"),
        (30000, "unknown status"),
    ])
    func nonZeroStatusIsAnError(status: Int, meaning: String) throws {
        for body in [#"{"status": \#(status)}"#, #"{"status": "\#(status)", "subscriber_id": "user-42", "environment": "Production"}"#] {
            let error = try mappingError(body)
            #expect(error?.field == "status")
            #expect(error?.reason.contains(String(status)) == true)
            #expect(error?.reason.contains(meaning) == true)
        }
    }

    @Test func expiredStatusIsAnErrorForModernReceipts() throws {
        let modern = Receipt.modern().replacing(#""status": 0"#, with: #""status": 21006"#)
        #expect(try mappingError(modern)?.reason.contains("expired") == true)
        #expect(try mappingError(#"{"status": 21006}"#)?.field == "status")
    }

    @Test func statusIsCheckedBeforeTheRest() throws {
        #expect(try mappingError(#"{"status": 21002, "receipt": "n/a", "environment": 7}"#)?.field == "status")
    }

    @Test func missingStatusIsAnError() throws {
        #expect(try mappingError(#"{"receipt": {}}"#)?.field == "status")
        #expect(try mappingError(#"{"status": "ok"}"#)?.field == "status")
        #expect(try mappingError(#"[]"#)?.field == "$")
    }

    @Test(arguments: [
        ("Sandbox", LedgerEnvironment.sandbox), ("Xcode", .sandbox), ("LocalTesting", .sandbox), ("Production", .production),
    ])
    func environmentIsRead(name: String, expected: LedgerEnvironment) throws {
        let m = try map(Receipt.modern(environment: name))
        #expect(m.environment == expected)
        #expect(m.drafts.allSatisfy { $0.environment == expected })
    }

    @Test func unknownEnvironmentIsAnError() throws {
        let error = try mappingError(Receipt.modern(environment: "Staging"))
        #expect(error?.field == "environment")
        #expect(error?.reason.contains("Staging") == true)
    }

    @Test func missingPurchaseDateNamesItsPath() throws {
        let undated =
            #"{"transaction_id": "1000000810000002", "original_transaction_id": "\#(Receipt.chain)", "product_id": "\#(Receipt.monthly)", "expires_date_ms": "\#(Receipt.feb08.ms)"}"#
        let error = try mappingError(Receipt.modernWith([Receipt.trial, undated]))
        #expect(error?.field == "latest_receipt_info[1].purchase_date_ms")
        #expect(error?.reason == "is required")
    }

    @Test func badValuesNameTheirPaths() throws {
        let ids = #""transaction_id": "1", "original_transaction_id": "1", "purchase_date_ms": "\#(Receipt.jan01.ms)""#
        let cases: [(String, String)] = [
            (#""product_id": "p", "expires_date_ms": "soon""#, "latest_receipt_info[0].expires_date_ms"),
            (#""product_id": "p", "expires_date_ms": "\#(Receipt.jan01.ms)""#, "latest_receipt_info[0].expires_date_ms"),
            (#""product_id": "p", "expires_date_ms": "\#(Receipt.jan08.ms)", "is_trial_period": "yes""#, "latest_receipt_info[0].is_trial_period"),
            (#""product_id": "p", "cancellation_date": "2024-02-30 10:00:00 Etc/GMT""#, "latest_receipt_info[0].cancellation_date"),
            (#""product_id": ["p"]"#, "latest_receipt_info[0].product_id"),
        ]
        for (members, path) in cases {
            let error = try mappingError(Receipt.modernWith(["{\(ids), \(members)}"]))
            #expect(error?.field == path, "\(members)")
        }
        #expect(try mappingError(#"{"status": 0, "receipt": {"in_app": [{"product_id": "p"}]}}"#)?.field == "receipt.in_app[0].transaction_id")
        #expect(try mappingError(#"{"status": 0, "receipt": {"in_app": ["x"]}}"#)?.field == "receipt.in_app[0]")
    }

    @Test func duplicateTransactionIsMappedOnceFromTheRenewalHistory() throws {
        let stale =
            #"{"transaction_id": "1000000810000002", "original_transaction_id": "\#(Receipt.chain)", "product_id": "\#(Receipt.monthly)", "purchase_date_ms": "not yet"}"#
        let json = """
            {"status": 0, "environment": "Production",
             "receipt": {"in_app": [\(stale), \(Receipt.trial)]},
             "latest_receipt_info": [\(Receipt.renewal1), \(Receipt.trial)]}
            """
        let m = try map(json)
        expectCompletable(m)
        #expect(m.drafts.map(\.idempotencyKey) == ["apple:txn:1000000800000001", "apple:txn:1000000810000002"])
        #expect(m.drafts[1].data["period_end"] == "2024-02-08T10:00:00Z")
        #expect(m.drafts[1].metadata["raw"] == (try JSONParser.parse(Receipt.renewal1)))
        #expect(try map(Receipt.modern()).drafts.count == 5)
    }

    @Test(arguments: [
        ("", "none"), (#""is_in_intro_offer_period": "true""#, "intro"), (#""promotional_offer_id": "winback_50""#, "promo"),
        (#""offer_code_ref_name": "SPRING24""#, "promo"), (#""is_trial_period": "true", "offer_code_ref_name": "FREEWEEK""#, "trial"),
    ])
    func offerIsRead(extra: String, offer: String) throws {
        let members =
            [
                #""transaction_id": "1000000810000002", "original_transaction_id": "\#(Receipt.chain)""#,
                #""product_id": "\#(Receipt.monthly)", "purchase_date_ms": "\#(Receipt.jan08.ms)", "expires_date_ms": "\#(Receipt.feb08.ms)""#,
            ] + (extra.isEmpty ? [] : [extra])
        let m = try map(Receipt.modernWith(["{" + members.joined(separator: ", ") + "}"]))
        expectCompletable(m)
        #expect(m.drafts.map { $0.data["offer"] } == [.string(offer)])
    }

    @Test func purchasesWithoutExpiryLeaveTheKindToTheCatalog() throws {
        let coins = Receipt.transaction(
            "1000000830000001", original: "1000000830000001", product: "com.example.coins.100", purchased: Receipt.jan08, expires: nil)
        let restored = Receipt.transaction(
            "1000000830000009", original: "1000000830000005", product: "com.example.lifetime", purchased: Receipt.feb08, expires: nil)
        let m = try map(Receipt.modernWith([restored, coins]))
        expectCompletable(m)
        #expect(m.drafts.map(\.type) == [.purchase, .purchase])
        #expect(
            m.drafts[1].data == [
                "product_id": "com.example.lifetime", "transaction_id": "1000000830000009",
                "original_transaction_id": "1000000830000005",
            ])
        #expect(m.originalTransactionIDs == ["1000000830000001", "1000000830000005"])
    }

    @Test func numbersMayBeJSONNumbers() throws {
        let json = """
            {"status": 0, "environment": "Sandbox",
             "receipt": {"in_app": [{"transaction_id": 2000000000000001, "original_transaction_id": 2000000000000001,
               "product_id": "com.example.pro.yearly", "purchase_date_ms": 1704103200000, "expires_date_ms": 1735725600000,
               "is_trial_period": false, "is_in_intro_offer_period": true}]},
             "pending_renewal_info": [{"auto_renew_status": 0, "original_transaction_id": 2000000000000001,
               "auto_renew_product_id": "com.example.pro.yearly", "is_in_billing_retry_period": 0}]}
            """
        let m = try map(json)
        expectCompletable(m)
        #expect(m.environment == .sandbox)
        #expect(
            m.drafts.map(\.idempotencyKey) == [
                "apple:txn:2000000000000001", "apple:auto_renew:2000000000000001:0:2000000000000001",
            ])
        #expect(m.drafts[0].data["period_end"] == "2025-01-01T10:00:00Z")
        #expect(m.drafts[0].data["offer"] == "intro")
        #expect(m.drafts[1].data["enabled"] == false)
    }

    @Test func emptyReceiptsHaveNoDrafts() throws {
        for json in [
            #"{"status": 0, "environment": "Production", "receipt": {"bundle_id": "com.example.app", "in_app": []}}"#,
            #"{"status": 0, "environment": "Sandbox", "receipt": {"in_app": []}, "latest_receipt_info": [], "pending_renewal_info": []}"#,
            #"{"status": 0, "receipt": {"bid": "com.example.app", "bvrs": "1.0"}}"#,
        ] {
            let m = try map(json)
            #expect(m.drafts.isEmpty)
            #expect(m.originalTransactionIDs.isEmpty)
        }
    }

    @Test func pacificTimeAloneIsRefused() throws {
        let entry =
            #"{"transaction_id": "1", "original_transaction_id": "1", "product_id": "p", "purchase_date_pst": "2024-01-01 02:00:00 America/Los_Angeles"}"#
        let error = try mappingError(Receipt.modernWith([entry]))
        #expect(error?.field == "latest_receipt_info[0].purchase_date_ms")
        #expect(error?.reason.contains("purchase_date_pst") == true)
    }
}
