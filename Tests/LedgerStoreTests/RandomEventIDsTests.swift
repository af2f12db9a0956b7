import Foundation
import Testing

@testable import LedgerStore

@Suite("Event ids drawn per group")
struct RandomEventIDsTests {
    @Test("a group's ids are distinct random (version 4, RFC 4122 variant) UUIDs")
    func versionFourAndDistinct() {
        #expect(RandomEventIDs.make(0).isEmpty)
        let ids = RandomEventIDs.make(5_000)
        #expect(ids.count == 5_000)
        #expect(Set(ids).count == ids.count)
        for id in ids {
            #expect(id.uuid.6 >> 4 == 4, "version nibble of \(id)")
            #expect(id.uuid.8 >> 6 == 0b10, "variant bits of \(id)")
            let text = id.uuidString
            #expect(text[text.index(text.startIndex, offsetBy: 14)] == "4")
        }
        #expect(Set(RandomEventIDs.make(100)).isDisjoint(with: ids))
    }
}
