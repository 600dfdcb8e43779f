package dtpb

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ServiceName is the unqualified gRPC service name of the Durable Task
// sidecar. It is deliberately not derived from the protobuf package (see
// amdahl_durabletask.proto): real workers call /TaskHubSidecarService/<Method>.
const ServiceName = "TaskHubSidecarService"

// Full method names, exactly as Durable Task workers put them on the wire.
const (
	MethodGetWorkItems                    = "/" + ServiceName + "/GetWorkItems"
	MethodCompleteOrchestratorTask        = "/" + ServiceName + "/CompleteOrchestratorTask"
	MethodAbandonTaskOrchestratorWorkItem = "/" + ServiceName + "/AbandonTaskOrchestratorWorkItem"
	MethodStartInstance                   = "/" + ServiceName + "/StartInstance"
)

// SidecarServer is the part of TaskHubSidecarService that amdahl serves.
// Implementations must be safe for concurrent use; errors should be gRPC
// status errors. Register one with a grpc.ServiceRegistrar's
// RegisterService(&SidecarServiceDesc, srv).
type SidecarServer interface {
	// GetWorkItems streams work items until ctx of stream ends or the
	// server stops.
	GetWorkItems(req *GetWorkItemsRequest, stream grpc.ServerStreamingServer[WorkItem]) error
	// CompleteOrchestratorTask accepts one completion or one chunk of it.
	CompleteOrchestratorTask(ctx context.Context, req *OrchestratorResponse) (*CompleteTaskResponse, error)
	// AbandonTaskOrchestratorWorkItem releases the work item of a token.
	AbandonTaskOrchestratorWorkItem(ctx context.Context, req *AbandonOrchestrationTaskRequest) (*AbandonOrchestrationTaskResponse, error)
	// StartInstance schedules a new orchestration instance; its work item
	// is then delivered on GetWorkItems.
	StartInstance(ctx context.Context, req *CreateInstanceRequest) (*CreateInstanceResponse, error)
}

func completeHandler(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
	in := new(OrchestratorResponse)
	if err := dec(in); err != nil {
		return nil, err
	}
	if icp == nil {
		return srv.(SidecarServer).CompleteOrchestratorTask(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: MethodCompleteOrchestratorTask}
	return icp(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(SidecarServer).CompleteOrchestratorTask(ctx, req.(*OrchestratorResponse))
	})
}

func abandonHandler(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
	in := new(AbandonOrchestrationTaskRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if icp == nil {
		return srv.(SidecarServer).AbandonTaskOrchestratorWorkItem(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: MethodAbandonTaskOrchestratorWorkItem}
	return icp(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(SidecarServer).AbandonTaskOrchestratorWorkItem(ctx, req.(*AbandonOrchestrationTaskRequest))
	})
}

func startInstanceHandler(srv any, ctx context.Context, dec func(any) error, icp grpc.UnaryServerInterceptor) (any, error) {
	in := new(CreateInstanceRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if icp == nil {
		return srv.(SidecarServer).StartInstance(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: MethodStartInstance}
	return icp(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return srv.(SidecarServer).StartInstance(ctx, req.(*CreateInstanceRequest))
	})
}

func getWorkItemsHandler(srv any, stream grpc.ServerStream) error {
	in := new(GetWorkItemsRequest)
	if err := stream.RecvMsg(in); err != nil {
		return status.Errorf(codes.InvalidArgument, "GetWorkItems: read request: %v", err)
	}
	return srv.(SidecarServer).GetWorkItems(in, &grpc.GenericServerStream[GetWorkItemsRequest, WorkItem]{ServerStream: stream})
}

// SidecarServiceDesc is the hand-written service descriptor; its
// ServiceName is the unqualified "TaskHubSidecarService".
var SidecarServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*SidecarServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "CompleteOrchestratorTask", Handler: completeHandler},
		{MethodName: "AbandonTaskOrchestratorWorkItem", Handler: abandonHandler},
		{MethodName: "StartInstance", Handler: startInstanceHandler},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "GetWorkItems", Handler: getWorkItemsHandler, ServerStreams: true},
	},
	Metadata: "amdahl_durabletask.proto",
}

// GetWorkItems opens the work-item stream on cc. The stream ends when ctx
// is cancelled or the server ends it.
func GetWorkItems(ctx context.Context, cc grpc.ClientConnInterface, req *GetWorkItemsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[WorkItem], error) {
	st, err := cc.NewStream(ctx, &SidecarServiceDesc.Streams[0], MethodGetWorkItems, opts...)
	if err != nil {
		return nil, err
	}
	x := &grpc.GenericClientStream[GetWorkItemsRequest, WorkItem]{ClientStream: st}
	if err := x.ClientStream.SendMsg(req); err != nil {
		return nil, err
	}
	if err := x.ClientStream.CloseSend(); err != nil {
		return nil, err
	}
	return x, nil
}

// StartInstance calls TaskHubSidecarService.StartInstance on cc.
func StartInstance(ctx context.Context, cc grpc.ClientConnInterface, req *CreateInstanceRequest, opts ...grpc.CallOption) (*CreateInstanceResponse, error) {
	out := new(CreateInstanceResponse)
	if err := cc.Invoke(ctx, MethodStartInstance, req, out, opts...); err != nil {
		return nil, err
	}
	return out, nil
}
