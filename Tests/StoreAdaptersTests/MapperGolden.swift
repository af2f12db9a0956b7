import AppleStore
import Foundation
import GoogleStore
import LedgerCore
import StoreAdapters
import StripeStore
import Testing

/// Collects the canonical `data` of every draft the mapper tests produce, while a golden test runs them
/// (issue 34 item 3: the typed write model must not change one byte of what the mappers emit).
final class GoldenSink: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    private var label = ""

    @TaskLocal static var current: GoldenSink?

    func begin(_ label: String) { lock.withLock { self.label = label } }

    func record(_ type: EventType, _ key: String, _ data: [String: JSONValue]) {
        let text = JSONValue.object(data).canonicalString()
        // Signed test notifications get a random notificationUUID, which only keys carry.
        let key = key.replacing(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/, with: "<uuid>")
        lock.withLock { lines.append("\(label)\t\(type.rawValue)\t\(key)\t\(text)") }
    }

    var text: String { lock.withLock { lines.joined(separator: "\n") + "\n" } }

    /// Passes drafts through, recording them when a golden test is collecting.
    @discardableResult
    static func record(_ drafts: [EventDraft]) -> [EventDraft] {
        if let sink = current { for d in drafts { sink.record(d.type, d.idempotencyKey, d.data) } }
        return drafts
    }

    static func record(_ events: [NewEvent]) -> [NewEvent] {
        if let sink = current { for e in events { sink.record(e.type, e.idempotencyKey, e.data) } }
        return events
    }

    /// Compares with `Resources/golden/<name>`, or writes it when `SUBLEDGER_RECORD_GOLDEN=1` (from the
    /// mappers as they were before a change, never to make a failing comparison pass).
    func check(_ name: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Resources/golden/\(name)")
        if ProcessInfo.processInfo.environment["SUBLEDGER_RECORD_GOLDEN"] == "1" {
            try Data(text.utf8).write(to: url)
            return
        }
        let golden = try String(contentsOf: url, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        let now = text.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(now.count == golden.count, "\(name): \(now.count) lines, golden \(golden.count)", sourceLocation: sourceLocation)
        var differing = 0
        for (a, b) in zip(now, golden) where a != b {
            differing += 1
            if differing <= 5 { Issue.record("\(name) differs:\n now    \(a)\n golden \(b)", sourceLocation: sourceLocation) }
        }
        #expect(differing == 0, "\(name): \(differing) lines differ", sourceLocation: sourceLocation)
    }
}

// The mapper entry points the mapper tests call, recorded.

extension StripeEventMapper {
    static func recordedMap(_ event: StripeEvent) throws(StoreMappingError) -> [EventDraft] { GoldenSink.record(try map(event)) }
    static func recordedInterpret(_ e: StripeEvent, options: StripeMappingOptions = .init()) throws(StoreMappingError) -> StripeMapping {
        let m = try interpret(e, options: options)
        GoldenSink.record(m.drafts)
        return m
    }
}

extension AppleNotificationMapper {
    static func recordedDrafts(for n: AppleNotification, paidUntil: Timestamp? = nil) throws(StoreMappingError) -> [EventDraft] {
        GoldenSink.record(try drafts(for: n, paidUntil: paidUntil))
    }
    static func recordedTransactionDraft(
        _ t: [String: JSONValue], environment: LedgerEnvironment, meta: [String: JSONValue]
    ) throws(StoreMappingError) -> EventDraft {
        let d = try transactionDraft(t, environment: environment, meta: meta)
        GoldenSink.record([d])
        return d
    }
}

extension AppleReceiptMapper {
    static func recordedMap(_ body: JSONValue) throws(AppleReceiptError) -> AppleReceiptMapping {
        let m = try map(body)
        GoldenSink.record(m.drafts)
        return m
    }
}

extension GoogleSubscriptionMapper {
    static func recordedResolve(
        _ n: GoogleNotification, purchase p: [String: JSONValue], orders: [String: [String: JSONValue]] = [:],
        periods: [String: ISODuration] = [:]
    ) throws(StoreMappingError) -> GoogleResolution {
        let r = try resolve(n, purchase: p, orders: orders, periods: periods)
        GoldenSink.record(r.drafts)
        return r
    }
}

extension GoogleProductMapper {
    static func recordedResolve(
        _ n: GoogleNotification, product: String, purchase p: [String: JSONValue], order placed: [String: JSONValue]? = nil
    ) throws(StoreMappingError) -> GoogleResolution {
        let r = try resolve(n, product: product, purchase: p, order: placed)
        GoldenSink.record(r.drafts)
        return r
    }
}

extension GoogleOrderPricing {
    static func recordedApply(order: [String: JSONValue], product: String? = nil, to draft: inout EventDraft) {
        apply(order: order, product: product, to: &draft)
        GoldenSink.record([draft])
    }
}
