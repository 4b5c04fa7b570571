package results

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
)

// ReadFile reads a whole results file into memory: for tests, benchmarks and small runs
// (the analysis package streams, column by column). It opens the file as the analysis does
// (Open: the kind of file, the run metadata) and checks its schema by name (Check).
func ReadFile(path string) ([]Result, *RunMeta, error) {
	f, err := Open(path, OpenOptions{BatchSize: 8192})
	if err != nil {
		return nil, nil, fmt.Errorf("results: %w", err)
	}
	defer f.Close()
	layout, err := f.Check()
	if err != nil {
		return nil, nil, fmt.Errorf("results: %w", err)
	}
	rr, err := f.Arrow.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("results: read %s: %w", path, err)
	}
	defer rr.Release()
	var out []Result
	for rr.Next() {
		if out, err = appendRecord(out, rr.Record(), layout); err != nil {
			return nil, nil, fmt.Errorf("results: read %s: %w", path, err)
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("results: read %s: %w", path, err)
	}
	return out, &f.Run, nil
}

// resultArrays are the columns of one record, located by name.
type resultArrays struct {
	requestID, scheduled, sent, first, end *array.Int64
	shard, prompt, promptServer, target    *array.Int32
	output, httpStatus                     *array.Int32
	chunkNS, chunkTokens                   *array.List
	source, status, errMsg                 *array.String
	sessionID, sessionWait                 *array.Int64 // nil in a file older than revision 1.1
	turn, promptCached                     *array.Int32
	gap, recArrival, recDuration           *array.Int64 // nil in a file older than revision 1.2
	recCached                              *array.Int32
	firstAnswer                            *array.Int64 // nil in a file older than revision 1.3
	reasoning                              *array.Int32
	reasoningSource                        *array.String
	images, imageTokens, inputs            *array.Int32 // nil in a file older than revision 1.4
}

func (c *resultArrays) locate(rec arrow.Record, l *Layout) error {
	x := NewArrays(rec, l)
	c.requestID = Array[*array.Int64](x, ColRequestID)
	c.shard = Array[*array.Int32](x, ColShard)
	c.scheduled = Array[*array.Int64](x, ColScheduledNS)
	c.sent = Array[*array.Int64](x, ColSentNS)
	c.first = Array[*array.Int64](x, ColFirstTokenNS)
	c.end = Array[*array.Int64](x, ColEndNS)
	c.chunkNS = Array[*array.List](x, ColChunkNS)
	c.chunkTokens = Array[*array.List](x, ColChunkTokens)
	c.prompt = Array[*array.Int32](x, ColPromptTokens)
	c.promptServer = Array[*array.Int32](x, ColPromptTokensServer)
	c.target = Array[*array.Int32](x, ColOutputTokensTarget)
	c.output = Array[*array.Int32](x, ColOutputTokens)
	c.source = Array[*array.String](x, ColOutputTokensSource)
	c.status = Array[*array.String](x, ColStatus)
	c.httpStatus = Array[*array.Int32](x, ColHTTPStatus)
	c.errMsg = Array[*array.String](x, ColError)
	c.sessionID = Array[*array.Int64](x, ColSessionID)
	c.turn = Array[*array.Int32](x, ColTurn)
	c.sessionWait = Array[*array.Int64](x, ColSessionWaitNS)
	c.promptCached = Array[*array.Int32](x, ColPromptTokensCached)
	c.gap = Array[*array.Int64](x, ColGapNS)
	c.recArrival = Array[*array.Int64](x, ColRecordedArrivalNS)
	c.recDuration = Array[*array.Int64](x, ColRecordedDurationNS)
	c.recCached = Array[*array.Int32](x, ColRecordedCachedTokens)
	c.firstAnswer = Array[*array.Int64](x, ColFirstAnswerNS)
	c.reasoning = Array[*array.Int32](x, ColReasoningTokens)
	c.reasoningSource = Array[*array.String](x, ColReasoningTokensSource)
	c.images = Array[*array.Int32](x, ColImages)
	c.imageTokens = Array[*array.Int32](x, ColImageTokens)
	c.inputs = Array[*array.Int32](x, ColInputs)
	// ttft_ms, tpot_ms and e2e_ms are derived (Result.TTFT, ...): not read back.
	return x.Err()
}

func appendRecord(out []Result, rec arrow.Record, l *Layout) ([]Result, error) {
	var c resultArrays
	if err := c.locate(rec, l); err != nil {
		return out, err
	}
	chunkNSv, ok1 := c.chunkNS.ListValues().(*array.Int64)
	chunkTokv, ok2 := c.chunkTokens.ListValues().(*array.Int32)
	if !ok1 || !ok2 {
		return out, fmt.Errorf("%s or %s holds the wrong element type", ColChunkNS, ColChunkTokens)
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		r := Result{
			RequestID: c.requestID.Value(i), Shard: c.shard.Value(i), ScheduledNS: c.scheduled.Value(i),
			SentNS: Int64At(c.sent, i), FirstTokenNS: Int64At(c.first, i), EndNS: Int64At(c.end, i),
			PromptTokens: c.prompt.Value(i), PromptTokensServer: Int32At(c.promptServer, i),
			OutputTokensTarget: c.target.Value(i), OutputTokens: Int32At(c.output, i),
			OutputTokensSource: StringAt(c.source, i), Status: Status(StringAt(c.status, i)),
			HTTPStatus: Int32At(c.httpStatus, i), Error: StringAt(c.errMsg, i),
			// Revision 1.1: an older file lacks the columns and they read as null.
			SessionID: Int64At(c.sessionID, i), Turn: Int32At(c.turn, i),
			SessionWaitNS: Int64At(c.sessionWait, i), PromptTokensCached: Int32At(c.promptCached, i),
			// Revision 1.2, likewise.
			GapNS: Int64At(c.gap, i), RecordedArrivalNS: Int64At(c.recArrival, i),
			RecordedDurationNS: Int64At(c.recDuration, i), RecordedCachedTokens: Int32At(c.recCached, i),
			// Revision 1.3, likewise.
			FirstAnswerNS: Int64At(c.firstAnswer, i), ReasoningTokens: Int32At(c.reasoning, i),
			ReasoningTokensSource: StringAt(c.reasoningSource, i),
			// Revision 1.4, likewise.
			Images: Int32At(c.images, i), ImageTokens: Int32At(c.imageTokens, i), Inputs: Int32At(c.inputs, i),
		}
		lo, hi := c.chunkNS.ValueOffsets(i)
		r.ChunkNS = append([]int64{}, chunkNSv.Int64Values()[lo:hi]...)
		if !c.chunkTokens.IsNull(i) {
			lo, hi := c.chunkTokens.ValueOffsets(i)
			r.ChunkTokens = append([]int32{}, chunkTokv.Int32Values()[lo:hi]...)
		}
		out = append(out, r)
	}
	return out, nil
}
