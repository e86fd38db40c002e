import Testing

@testable import Autosave

@Suite("The scheduler's heap of deadlines")
struct DeadlineHeapTests {
    @Test(
        "Pops every pair pushed, earliest deadline first, each deadline with its own path, through interleaved pushes and pops"
    )
    func order() {
        var generator = SystemRandomNumberGenerator()
        var heap = DeadlineHeap()
        var model: [(Int64, String)] = []
        for step in 0..<20_000 {
            if model.isEmpty || Int.random(in: 0..<3, using: &generator) > 0 {
                // Few distinct deadlines: ties are common, as when many edits share a moment.
                let time = Int64.random(in: 0..<500, using: &generator)
                let path = "d\(step % 97)/doc\(step).txt"
                heap.push(Moment(nanoseconds: time), path)
                model.append((time, path))
            } else {
                let popped = heap.pop()
                let earliest = model.map(\.0).min()!
                #expect(popped?.0.nanoseconds == earliest)
                let index = model.firstIndex { $0.0 == popped?.0.nanoseconds && $0.1 == popped?.1 }
                #expect(index != nil, "\(String(describing: popped)) was pushed with that deadline")
                if let index { model.remove(at: index) }
            }
            #expect(heap.first?.nanoseconds == model.map(\.0).min())
        }
        var last = Int64.min
        while let (time, path) = heap.pop() {
            #expect(time.nanoseconds >= last)
            last = time.nanoseconds
            let index = model.firstIndex { $0.0 == time.nanoseconds && $0.1 == path }
            #expect(index != nil)
            if let index { model.remove(at: index) }
        }
        #expect(model.isEmpty && heap.isEmpty)
    }

    @Test("A heap that grew for a burst gives its room back as it empties, and keeps its order")
    func roomGivenBack() {
        var heap = DeadlineHeap()
        for step in 0..<100_000 { heap.push(Moment(nanoseconds: Int64(100_000 - step)), "doc\(step).txt") }
        #expect(heap.capacity >= 100_000)
        var last = Int64.min
        while heap.count > 10 {
            let (time, _) = heap.pop()!
            #expect(time.nanoseconds >= last)
            last = time.nanoseconds
        }
        #expect(heap.capacity < 2 * DeadlineHeap.keptCapacity, "room for \(heap.capacity) pairs kept for 10")
        var rest: [String] = []
        while let (time, path) = heap.pop() {
            #expect(time.nanoseconds >= last)
            last = time.nanoseconds
            rest.append(path)
        }
        #expect(rest == (0..<10).reversed().map { "doc\($0).txt" })
    }
}
