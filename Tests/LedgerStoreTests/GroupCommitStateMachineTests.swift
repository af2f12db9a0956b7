import PostgresNIO
import Testing

@testable import LedgerStore

/// The group committer's decisions alone: no tasks, no database.
@Suite("Group commit state machine")
struct GroupCommitStateMachineTests {
    typealias Machine = GroupCommitStateMachine<String>

    static func entry(_ name: String, events: Int = 1, weight: Int = 1) -> Machine.Entry {
        Machine.Entry(waiter: name, events: events, weight: weight)
    }

    static func running(pipelineEvents: Int = 16, maxWeight: Int = 1000) -> Machine {
        var machine = Machine(maxWeight: maxWeight, pipelineEvents: pipelineEvents)
        let step1 = machine.runStarted()
        #expect(step1)
        return machine
    }

    @Test("a lone request commits itself at once; the next waits and starts a group only when the first ends")
    func loneRequestLeads() {
        var m = Self.running()
        let step1 = m.arrive()
        #expect(step1 == .commitNow)
        let step2 = m.arrive()
        #expect(step2 == .enqueue)
        let step3 = m.enqueue(Self.entry("b"))
        #expect(step3 == .wait(startGroup: false), "one waiting event does not pipeline")
        let step4 = m.sent()
        #expect(step4 == .none)
        let step5 = m.finished(sent: true)
        #expect(step5 == .startGroup)
        let step6 = m.takeGroup()
        #expect(step6 == ["b"])
        let step7 = m.finished(sent: false)
        #expect(step7 == .none)
        #expect(m.inFlight == 0 && m.queue.isEmpty)
        let step8 = m.arrive()
        #expect(step8 == .commitNow)
        #expect((m.groups, m.jobs) == (3, 3))
    }

    @Test("a second group is started behind one in flight only once it was sent and enough events wait; never a third")
    func pipelining() {
        var m = Self.running(pipelineEvents: 2)
        let step1 = m.arrive()
        #expect(step1 == .commitNow)
        let step2 = m.enqueue(Self.entry("a"))
        #expect(step2 == .wait(startGroup: false))
        let step3 = m.enqueue(Self.entry("b"))
        #expect(step3 == .wait(startGroup: false), "the group in flight has not been sent")
        let step4 = m.sent()
        #expect(step4 == .startGroup)
        let step5 = m.takeGroup()
        #expect(step5 == ["a", "b"])
        let step6 = m.enqueue(Self.entry("c", events: 5))
        #expect(step6 == .wait(startGroup: false), "the second is still preparing")
        let step7 = m.sent()
        #expect(step7 == .none, "two in flight: no third")
        let step8 = m.finished(sent: true)
        #expect(step8 == .startGroup)
        let step9 = m.takeGroup()
        #expect(step9 == ["c"])
        #expect(m.pipelined == 2 && m.mostInFlight == 2)
    }

    @Test("a group that is never sent passes the preparing turn on when it ends")
    func unsentGroupReleasesTurn() {
        var m = Self.running(pipelineEvents: 1)
        let step1 = m.arrive()
        #expect(step1 == .commitNow)
        let step2 = m.enqueue(Self.entry("a"))
        #expect(step2 == .wait(startGroup: false))
        let step3 = m.finished(sent: false)
        #expect(step3 == .startGroup)
        let step4 = m.takeGroup()
        #expect(step4 == ["a"])
    }

    @Test("light jobs go first within the weight budget; a job heavier than the budget goes alone")
    func selection() {
        var m = Self.running(maxWeight: 100)
        let step1 = m.arrive()
        #expect(step1 == .commitNow)
        for name in ["h1", "h2"] { _ = m.enqueue(Self.entry(name, weight: 64)) }
        _ = m.enqueue(Self.entry("light", weight: 1))
        _ = m.enqueue(Self.entry("huge", weight: 500))
        let step2 = m.finished(sent: false)
        #expect(step2 == .startGroup)
        let step3 = m.takeGroup()
        #expect(step3 == ["h1", "light"], "the light job first, then what fits the budget, in arrival order")
        let step4 = m.finished(sent: false)
        #expect(step4 == .startGroup)
        let step5 = m.takeGroup()
        #expect(step5 == ["h2"])
        let step6 = m.finished(sent: false)
        #expect(step6 == .startGroup)
        let step7 = m.takeGroup()
        #expect(step7 == ["huge"])
        let step8 = m.finished(sent: false)
        #expect(step8 == .none)
        #expect(m.queuedEvents == 0)
    }

    @Test("without a run loop a lone request still commits; one that would wait is refused")
    func unattended() {
        var m = Machine()
        let step1 = m.arrive()
        #expect(step1 == .commitNow)
        let step2 = m.arrive()
        #expect(step2 == .enqueue)
        let step3 = m.enqueue(Self.entry("a"))
        #expect(step3 == .refuse(.notRunning))
        let step4 = m.finished(sent: true)
        #expect(step4 == .none)
        let step5 = m.shutdown()
        #expect(step5 == .none)
    }

    @Test("graceful shutdown drains the queue and the groups in flight, then stops; later requests are refused")
    func shutdownDrains() {
        var m = Self.running()
        let step1 = m.arrive()
        #expect(step1 == .commitNow)
        _ = m.enqueue(Self.entry("a"))
        let step2 = m.shutdown()
        #expect(step2 == .none, "a group in flight and one waiting")
        let step3 = m.finished(sent: false)
        #expect(step3 == .startGroup, "the queue is still committed while draining")
        let step4 = m.takeGroup()
        #expect(step4 == ["a"])
        let step5 = m.finished(sent: false)
        #expect(step5 == .stopRun)
        let step6 = m.runEnded()
        #expect(step6.isEmpty)
        let step7 = m.arrive()
        #expect(step7 == .refuse(.stopped))
        let step8 = m.runStarted()
        #expect(step8 == false, "a committer runs once")
    }

    @Test("shutdown with nothing in flight stops at once; a cancelled loop leaves its queue to be failed")
    func shutdownIdleAndCancel() {
        var idle = Self.running()
        let step1 = idle.shutdown()
        #expect(step1 == .stopRun)

        var cancelled = Self.running()
        let step2 = cancelled.arrive()
        #expect(step2 == .commitNow)
        _ = cancelled.enqueue(Self.entry("a"))
        _ = cancelled.enqueue(Self.entry("b"))
        let step3 = cancelled.runEnded()
        #expect(step3 == ["a", "b"])
        let step4 = cancelled.enqueue(Self.entry("c"))
        #expect(step4 == .refuse(.stopped))
    }
}

/// The commit's fallback ladder, rung by rung (`CommitRung.step`).
@Suite("Commit ladder")
struct CommitLadderTests {
    @Test("one trip: written is done; refused goes the general way; a reused key or failed version check looks keys up")
    func oneTrip() {
        #expect(CommitRung.step(after: .oneTrip, .refused, jobs: 3) == .init(next: .general, forgetsBelief: false))
        #expect(CommitRung.step(after: .oneTrip, .needsKeyLookup, jobs: 3) == .init(next: .keyLookup, forgetsBelief: false))
        #expect(CommitRung.step(after: .oneTrip, .statementFailed, jobs: 3) == .init(next: .oneByOne, forgetsBelief: true))
        #expect(CommitRung.step(after: .oneTrip, .outage, jobs: 3) == .init(next: nil, forgetsBelief: true))
    }

    @Test("general: a reused key or failed version check looks keys up; a refused row splits the group")
    func general() {
        #expect(CommitRung.step(after: .general, .needsKeyLookup, jobs: 2) == .init(next: .keyLookup, forgetsBelief: false))
        #expect(CommitRung.step(after: .general, .statementFailed, jobs: 2) == .init(next: .oneByOne, forgetsBelief: true))
        #expect(CommitRung.step(after: .general, .streamTooLarge, jobs: 2) == .init(next: .oneByOne, forgetsBelief: false))
        #expect(CommitRung.step(after: .general, .outage, jobs: 2) == .init(next: nil, forgetsBelief: true))
    }

    @Test("key look-up: any statement error splits a group, and fails a lone job with its own error")
    func keyLookup() {
        #expect(CommitRung.step(after: .keyLookup, .needsKeyLookup, jobs: 2) == .init(next: .oneByOne, forgetsBelief: true))
        #expect(CommitRung.step(after: .keyLookup, .needsKeyLookup, jobs: 1) == .init(next: nil, forgetsBelief: true))
        #expect(CommitRung.step(after: .keyLookup, .statementFailed, jobs: 1) == .init(next: nil, forgetsBelief: true))
        #expect(CommitRung.step(after: .keyLookup, .streamTooLarge, jobs: 1) == .init(next: nil, forgetsBelief: false))
    }

    @Test("one by one: each job starts the ladder again alone, so nothing below it but failure")
    func oneByOne() {
        #expect(CommitRung.step(after: .oneByOne, .statementFailed, jobs: 1) == .init(next: nil, forgetsBelief: true))
        #expect(CommitRung.step(after: .oneByOne, .outage, jobs: 1) == .init(next: nil, forgetsBelief: true))
    }

    @Test("errors are sorted into outcomes: conflicts of the fast path, limits, outages")
    func outcomes() {
        #expect(CommitRung.Outcome(AppendWriter.NeedsKeyLookup()) == .needsKeyLookup)
        #expect(CommitRung.Outcome(AppendWriter.StreamTooLarge(subscriberID: "s", events: 1, windows: 1)) == .streamTooLarge)
        #expect(CommitRung.Outcome(StoreError.unavailable("down")) == .outage)
        #expect(CommitRung.Outcome(CancellationError()) == .outage)
    }
}
