import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Random (version 4) event ids drawn in one system call per group.
///
/// `UUID()` opens, reads and closes `/dev/urandom` for each id on Linux: three system calls per appended
/// event. Here the device stays open and one read gives a whole group's bytes, from the same source.
enum RandomEventIDs {
    /// Opened once, on first use (-1 if it cannot be: ids then come from `UUID()`).
    private static let device: Int32 = open("/dev/urandom", O_RDONLY | O_CLOEXEC)

    static func make(_ count: Int) -> [UUID] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: count * 16)
        let device = Self.device
        let filled =
            device >= 0
            && bytes.withUnsafeMutableBytes { buffer -> Bool in
                var done = 0
                while done < buffer.count {
                    let n = read(device, buffer.baseAddress! + done, buffer.count - done)
                    if n > 0 {
                        done += n
                    } else if n < 0 && errno == EINTR {
                        continue
                    } else {
                        return false
                    }
                }
                return true
            }
        guard filled else { return (0..<count).map { _ in UUID() } }
        return (0..<count).map { i in
            let b = i * 16
            return UUID(
                uuid: (
                    bytes[b], bytes[b + 1], bytes[b + 2], bytes[b + 3], bytes[b + 4], bytes[b + 5],
                    bytes[b + 6] & 0x0F | 0x40, bytes[b + 7], bytes[b + 8] & 0x3F | 0x80, bytes[b + 9], bytes[b + 10],
                    bytes[b + 11], bytes[b + 12], bytes[b + 13], bytes[b + 14], bytes[b + 15]
                ))
        }
    }
}
