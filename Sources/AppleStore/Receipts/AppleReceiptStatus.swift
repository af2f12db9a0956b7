/// The meanings of verifyReceipt's non-zero `status` codes, for error messages an operator can act on.
enum AppleReceiptStatus {
    static func meaning(_ status: Int) -> String {
        switch status {
        case 21000: "malformed request: the request to the App Store was not an HTTP POST of a JSON object"
        case 21001: "obsolete status (no longer sent by the App Store)"
        case 21002: "malformed receipt data: receipt-data is missing or is not a valid receipt"
        case 21003: "the receipt could not be authenticated"
        case 21004: "shared secret mismatch: the shared secret does not match the one on the account"
        case 21005: "the receipt server is temporarily unavailable: retry later"
        case 21006: "the subscription has expired (only iOS 6 style receipts carry data with this status)"
        case 21007: "sandbox receipt sent to production: send it to the sandbox verifyReceipt endpoint"
        case 21008: "production receipt sent to sandbox: send it to the production verifyReceipt endpoint"
        case 21009: "internal data access error at the App Store: retry later"
        case 21010: "account not found: the user account cannot be found or has been deleted"
        case 21100...21199: "internal data access error at the App Store: retry later"
        default: "unknown status"
        }
    }

    static func explain(_ status: Int) -> String {
        "is \(status): \(meaning(status))"
    }
}
