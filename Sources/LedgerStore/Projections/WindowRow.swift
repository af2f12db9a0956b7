import Foundation
import LedgerCore

/// How a window is read back from the `windows` table: one select list and one decoder for every read
/// (a subscriber's ledger, the export pages).
enum WindowRow {
    /// The window's columns (table alias `w`), in the order `decode` reads them.
    static let columns = """
        w.entitlement, w.start_at, w.granted_end, w.kind, w.product_id, w.transaction_id, w.source_event_id,
        w.source_position, w.environment, w.cut_at, w.cut_by, w.cut_cause
        """

    /// As many typed NULLs as `columns`, for a row of a UNION that is not a window.
    static let nulls = """
        NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::text, NULL::text, NULL::text, NULL::uuid, NULL::int8,
        NULL::text, NULL::timestamptz, NULL::uuid, NULL::text
        """

    /// The window in the next cells, or nil when they are the NULLs of a row that is not one.
    static func decode(_ c: inout BinaryCells) throws -> Window? {
        let (e, start, granted, kind) = (try c.optionalString(), try c.optionalTimestamp(), try c.optionalTimestamp(), try c.optionalString())
        let (product, txn, source) = (try c.optionalString(), try c.optionalString(), try c.optionalUUID())
        let (position, env, cutAt) = (try c.optionalInt64(), try c.optionalString(), try c.optionalTimestamp())
        let (cutBy, cause) = (try c.optionalUUID(), try c.optionalString())
        guard let e, let start, let kind, let source, let position, let env else { return nil }
        var cuts: [Window.Cut] = []
        if let cutAt, let cutBy, let cause = cause.flatMap(Window.Cut.Cause.init(rawValue:)) {
            cuts = [Window.Cut(at: cutAt, eventID: cutBy, cause: cause)]
        }
        return Window(
            entitlement: e, start: start, grantedEnd: granted, kind: Window.Kind(rawValue: kind) ?? .paid, productID: product,
            transactionID: txn, sourceEventID: source, sourcePosition: position, environment: LedgerEnvironment(rawValue: env) ?? .production,
            cuts: cuts)
    }
}
