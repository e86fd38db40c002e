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
}
