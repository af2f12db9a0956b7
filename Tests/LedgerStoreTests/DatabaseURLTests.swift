import LedgerStore
import Testing

@Suite("Database URL to client configuration")
struct DatabaseURLTests {
    @Test("pooled connections idle out after 5 s with no keep-alive timers (bounded timer memory)")
    func poolTimers() throws {
        let config = try DatabaseURL("postgres://u:p@127.0.0.1:5432/db").clientConfiguration(maximumConnections: 7)
        #expect(config.options.maximumConnections == 7)
        #expect(config.options.connectionIdleTimeout == .seconds(5))
        #expect(config.options.keepAliveBehavior == nil)
    }
}
